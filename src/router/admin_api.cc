#include "router/admin_api.h"

#include "router/membership.h"

namespace tessera::router {

using nlohmann::json;

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

}  // namespace tessera::router
