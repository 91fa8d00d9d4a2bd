#include "router/admin_api.h"

#include <memory>

#include <fmt/core.h>

#include "api/openai.h"
#include "base/log.h"

namespace tessera::router {
namespace {

using nlohmann::json;
using WriterPtr = std::shared_ptr<http::ResponseWriter>;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string error_json(int status, std::string message, std::string code = "") {
  api::ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = "invalid_request_error";
  e.code = std::move(code);
  return api::error_body(e);
}

// The body of an add, remove or drain call; nullopt after answering 400.
std::optional<std::pair<std::string, json>> admin_body(const http::Request& r, const WriterPtr& w) {
  auto body = parse_admin_body(r.body);
  if (body.ok()) return std::move(*body);
  w->send(400, error_json(400, body.status().message()));
  return std::nullopt;
}

}  // namespace

json node_status_json(const NodeStatus& s) {
  return {{"url", s.load.url},
          {"role", s.load.role},
          {"runner", s.load.runner},
          {"host_id", s.load.host_id},
          {"models", s.load.models},
          {"healthy", s.healthy},
          {"draining", s.draining},
          {"in_rotation", s.healthy && !s.draining},
          {"capacity", s.load.capacity},
          {"in_flight", s.load.in_flight},
          {"outstanding_tokens", s.load.outstanding_tokens},
          {"tokens_per_s", s.load.tokens_per_s},
          {"requests_total", s.requests_total},
          {"failures_total", s.failures_total}};
}

Result<std::pair<std::string, json>> parse_admin_body(std::string_view body) {
  json j = json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("url") || !j["url"].is_string())
    return invalid_argument("expected a JSON body {\"url\": \"http://host:port\"}");
  TS_ASSIGN_OR_RETURN(std::string url, normalize_node_url(j["url"].get<std::string>()));
  return std::make_pair(std::move(url), std::move(j));
}

void mount_admin_routes(http::Server& server, AdminTarget target,
                        const std::function<http::Handler(http::Handler)>& guard) {
  auto t = std::make_shared<const AdminTarget>(std::move(target));
  server.route(
      "GET", "/admin/nodes", guard([t](const http::Request&, const WriterPtr& w) {
        json nodes = json::array();
        for (const auto& s : t->registry->list()) {  // with the blocks its KV events say it holds, when they are read
          nodes.push_back(node_status_json(s));
          if (const auto b = t->kv_event_blocks ? t->kv_event_blocks(s.load.url) : std::nullopt)
            nodes.back()["kv_event_blocks"] = {{"device", (*b)[0]}, {"host", (*b)[1]}, {"disk", (*b)[2]}};
          if (const auto b = t->kv_event_states ? t->kv_event_states(s.load.url) : std::nullopt)
            nodes.back()["kv_event_states"] = {{"device", (*b)[0]}, {"host", (*b)[1]}, {"disk", (*b)[2]}};
        }
        w->send(200, dump({{"strategy", t->strategy}, {"nodes", nodes}}));
      }));
  server.route("POST", "/admin/nodes", guard([t](const http::Request& r, const WriterPtr& w) {
                 auto body = admin_body(r, w);
                 if (!body) return;
                 NodeSpec spec{body->first, 0};
                 if (body->second.contains("capacity")) {
                   const json& cap = body->second["capacity"];
                   if (!cap.is_number() || !(cap.get<double>() > 0)) {
                     return w->send(400, error_json(400, "capacity must be a positive number"));
                   }
                   spec.capacity = cap.get<double>();
                 }
                 if (t->registry->contains(spec.url)) {
                   return w->send(
                       409, error_json(409, fmt::format("node {} is already registered", spec.url), "node_exists"));
                 }
                 t->add_node(spec);
                 log::info("router: node {} added", spec.url);
                 w->send(201, dump(node_status_json(*t->registry->status(spec.url))));
               }));
  server.route("POST", "/admin/nodes/remove", guard([t](const http::Request& r, const WriterPtr& w) {
                 auto body = admin_body(r, w);
                 if (!body) return;
                 if (!t->remove_node(body->first)) {
                   return w->send(
                       404, error_json(404, fmt::format("node {} is not registered", body->first), "node_not_found"));
                 }
                 log::info("router: node {} removed", body->first);
                 w->send(200, dump({{"url", body->first}, {"removed", true}}));
               }));
  server.route("POST", "/admin/nodes/drain", guard([t](const http::Request& r, const WriterPtr& w) {
                 auto body = admin_body(r, w);
                 if (!body) return;
                 bool drain = true;
                 if (body->second.contains("drain")) {
                   if (!body->second["drain"].is_boolean()) {
                     return w->send(400, error_json(400, "drain must be true or false"));
                   }
                   drain = body->second["drain"].get<bool>();
                 }
                 if (!t->registry->set_draining(body->first, drain)) {
                   return w->send(
                       404, error_json(404, fmt::format("node {} is not registered", body->first), "node_not_found"));
                 }
                 w->send(200, dump(node_status_json(*t->registry->status(body->first))));
               }));
}

}  // namespace tessera::router
