// POST/GET /admin/role (role_admin.h).
#include "serve/role_admin.h"

#include <memory>
#include <mutex>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "base/log.h"

namespace tessera::serve {
namespace {

using json = nlohmann::json;

std::string error(const std::string& message, const std::string& code) {
  return json{{"error", {{"message", message}, {"type", "invalid_request_error"}, {"code", code}}}}.dump();
}

}  // namespace

Result<std::string> parse_role_request(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return invalid_argument("the body must be a JSON object {\"role\": ...}");
  if (!j.contains("role") || !j["role"].is_string()) return invalid_argument("'role' must be a string");
  std::string role = j["role"].get<std::string>();
  if (role != "prefill" && role != "decode" && role != "both") {
    return invalid_argument(fmt::format("unknown role '{}'; roles: prefill, decode, both", role));
  }
  return role;
}

void register_role_routes(http::Server& server, RoleAdminOptions options) {
  auto o = std::make_shared<RoleAdminOptions>(std::move(options));
  auto mu = std::make_shared<std::mutex>();  // one change at a time, registration included
  auto current = [o] { return o->pd != nullptr ? o->pd->role() : std::string("both"); };
  server.route(
      "GET", "/admin/role",
      http::require_cluster_token(o->cluster_token, [o, current](const http::Request&,
                                                                 std::shared_ptr<http::ResponseWriter> w) {
        const bool switchable = o->pd != nullptr && o->pd->options().switchable;
        w->send(200,
                json{{"role", current()}, {"switchable", switchable}, {"in_flight", o->in_flight ? o->in_flight() : 0}}
                    .dump());
      }));
  server.route(
      "POST", "/admin/role",
      http::require_cluster_token(o->cluster_token, [o, mu, current](const http::Request& r,
                                                                     std::shared_ptr<http::ResponseWriter> w) {
        auto role = parse_role_request(r.body);
        if (!role.ok()) return w->send(400, error(role.status().message(), "invalid_role"));
        std::lock_guard<std::mutex> lock(*mu);
        const std::string from = current();
        if (o->pd == nullptr) {
          if (*role == from) return w->send(200, json{{"role", from}, {"from", from}, {"changed", false}}.dump());
          return w->send(409, error("this node has no prefill/decode service (start it with --role-switchable)",
                                    "not_switchable"));
        }
        if (Status s = o->pd->set_role(*role); !s.ok()) {
          return w->send(s.code() == StatusCode::kInvalidArgument ? 400 : 409, error(s.message(), "not_switchable"));
        }
        Status reg = *role != from && o->on_change ? o->on_change(*role) : ok_status();
        if (!reg.ok()) {
          // The node already works in its new role; the control plane hears of it on the next heartbeat.
          log::warn("role change {} -> {}: re-registration failed: {}", from, *role, reg.message());
        }
        w->send(200, json{{"role", *role},
                          {"from", from},
                          {"changed", *role != from},
                          {"registered", reg.ok()},
                          {"in_flight", o->in_flight ? o->in_flight() : 0}}
                         .dump());
      }));
}

}  // namespace tessera::serve
