// Dashboard (dashboard.h): routes, access checks and the state document. The page itself is static; every
// number it shows comes from /dashboard/api/state, assembled here from the registry, the gateway's LiveStats
// and the sampler's last snapshot.
#include "router/dashboard/dashboard.h"

#include <array>

#include <fmt/core.h>

#include "router/admin_api.h"
#include "router/dashboard/assets.h"
#include "router/live_stats.h"

namespace tessera::router {
namespace {

using json = nlohmann::json;
using WriterPtr = std::shared_ptr<http::ResponseWriter>;

// Scripts and styles from this origin only: no inline script or style element, no eval, no plug-ins, no
// framing. `data:` images for the empty favicon.
constexpr std::string_view kCsp =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

http::Headers security_headers(std::string_view cache_control) {
  return {{"Content-Security-Policy", std::string(kCsp)},
          {"X-Content-Type-Options", "nosniff"},
          {"Referrer-Policy", "no-referrer"},
          {"Cache-Control", std::string(cache_control)}};
}

// RFC 4648 base64 (the Basic credentials); nullopt on a character outside the alphabet.
std::optional<std::string> base64_decode(std::string_view in) {
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    int v;
    if (c >= 'A' && c <= 'Z')
      v = c - 'A';
    else if (c >= 'a' && c <= 'z')
      v = c - 'a' + 26;
    else if (c >= '0' && c <= '9')
      v = c - '0' + 52;
    else if (c == '+')
      v = 62;
    else if (c == '/')
      v = 63;
    else if (c == '=')
      break;
    else
      return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return out;
}

// The password of "Authorization: Basic base64(user:password)", or nullopt.
std::optional<std::string> basic_password(const http::Request& r) {
  const std::string auth = r.header("authorization");
  constexpr std::string_view kBasic = "Basic ";
  if (auth.size() <= kBasic.size() || auth.compare(0, kBasic.size(), kBasic) != 0 || auth.size() > 4096) {
    return std::nullopt;
  }
  auto decoded = base64_decode(std::string_view(auth).substr(kBasic.size()));
  if (!decoded) return std::nullopt;
  const size_t colon = decoded->find(':');
  if (colon == std::string::npos) return std::nullopt;
  return decoded->substr(colon + 1);
}

json null_if(bool none, double v) { return none ? json(nullptr) : json(v); }

}  // namespace

Dashboard::Dashboard(Gateway& gateway, DashboardOptions options)
    : gateway_(gateway), options_(std::move(options)), sampler_(gateway.registry(), [this] {
        SamplerOptions s = options_.sampler;
        s.cluster_token = options_.cluster_token;
        s.tls_ca_file = options_.tls_ca_file;
        return s;
      }()) {}

Dashboard::~Dashboard() { stop(); }

void Dashboard::start(std::unique_ptr<ctrl::Store> store) { sampler_.start(std::move(store)); }
void Dashboard::stop() { sampler_.stop(); }

bool Dashboard::allowed(const http::Request& r) const {
  if (options_.api_keys.empty()) return true;
  if (http::presents_cluster_token(r, options_.cluster_token)) return true;
  if (http::api_key_matches(http::bearer_token(r), options_.api_keys)) return true;
  if (auto password = basic_password(r)) {
    return http::api_key_matches(*password, options_.api_keys) || options_.cluster_token.matches(*password);
  }
  return false;
}

void Dashboard::mount(http::Server& server) {
  // Every dashboard route: refuse without a credential, asking a browser for one (Basic: the key as password).
  auto guarded = [this](auto handler) {
    return [this, handler](const http::Request& r, const WriterPtr& w) {
      if (allowed(r)) return handler(r, w);
      http::Headers h = security_headers("no-store");
      h["WWW-Authenticate"] = R"(Basic realm="tessera dashboard", charset="UTF-8")";
      const bool sent_any = !r.header("authorization").empty();
      w->send(401,
              dump({{"error",
                     {{"message", sent_any ? "Incorrect API key provided"
                                           : "The dashboard needs the router's API key: send it as 'Authorization: "
                                             "Bearer KEY', or as the password of HTTP Basic authentication"},
                      {"type", "invalid_request_error"},
                      {"param", nullptr},
                      {"code", "invalid_api_key"}}}}),
              "application/json", std::move(h));
    };
  };
  auto page = guarded([](const http::Request& r, const WriterPtr& w) {
    for (const auto& a : dashboard_assets()) {
      if (a.name != "index.html") continue;
      http::Headers h = security_headers("no-cache");
      h["ETag"] = std::string(a.etag);
      if (r.header("if-none-match") == a.etag) return w->send(304, "", std::string(a.content_type), std::move(h));
      return w->send(200, std::string(a.bytes), std::string(a.content_type), std::move(h));
    }
    w->send(500, "the dashboard page was not built in", "text/plain; charset=utf-8");
  });
  server.route("GET", "/dashboard", page);
  server.route("GET", "/dashboard/", page);
  server.route_prefix("GET", "/dashboard/assets/", guarded([](const http::Request& r, const WriterPtr& w) {
                        const std::string_view name =
                            std::string_view(r.path).substr(std::string_view("/dashboard/assets/").size());
                        for (const auto& a : dashboard_assets()) {
                          if (a.name != name || a.name == "index.html") continue;
                          http::Headers h = security_headers("no-cache");
                          h["ETag"] = std::string(a.etag);
                          if (r.header("if-none-match") == a.etag) {
                            return w->send(304, "", std::string(a.content_type), std::move(h));
                          }
                          return w->send(200, std::string(a.bytes), std::string(a.content_type), std::move(h));
                        }
                        w->send(404, dump({{"error", {{"message", fmt::format("no dashboard asset '{}'", name)}}}}),
                                "application/json", security_headers("no-store"));
                      }));
  server.route("GET", "/dashboard/api/state", guarded([this](const http::Request&, const WriterPtr& w) {
                 w->send(200, dump(state()), "application/json", security_headers("no-store"));
               }));
}

json Dashboard::state() {
  sampler_.touch();
  json snap = sampler_.snapshot();
  const json& reports = snap["nodes"];
  json nodes = json::array();
  for (const NodeStatus& s : gateway_.registry().list()) {
    json n = node_status_json(s);  // as GET /admin/nodes lists it, models included
    if (s.load.role.empty()) n["role"] = "unknown";
    if (auto it = reports.find(s.load.url); it != reports.end()) {
      for (const auto& [k, v] : it->items()) n[k] = v;
    }
    nodes.push_back(std::move(n));
  }
  json t = json::array(), requests = json::array(), errors = json::array(), tokens = json::array();
  json ttft = json::array(), ttft_max = json::array(), tpot = json::array(), tpot_max = json::array();
  for (const SecondStats& s : gateway_.live_stats().last(options_.history_seconds)) {
    t.push_back(s.second);
    requests.push_back(s.requests);
    errors.push_back(s.errors);
    tokens.push_back(s.output_tokens);
    ttft.push_back(null_if(s.ttft_count == 0, s.ttft_mean_s * 1000));
    ttft_max.push_back(null_if(s.ttft_count == 0, s.ttft_max_s * 1000));
    tpot.push_back(null_if(s.tpot_count == 0, s.tpot_mean_s * 1000));
    tpot_max.push_back(null_if(s.tpot_count == 0, s.tpot_max_s * 1000));
  }
  const std::string_view charts = dashboard_chart_library();
  return {{"now_ms", wall_clock().now_ns() / 1000000},
          {"strategy", gateway_.options().strategy},
          {"chart_library", charts.empty() ? json(nullptr) : json(std::string(charts))},
          {"nodes", std::move(nodes)},
          {"series",
           {{"t", std::move(t)},
            {"requests", std::move(requests)},
            {"errors", std::move(errors)},
            {"tokens_per_s", std::move(tokens)},
            {"ttft_ms", std::move(ttft)},
            {"ttft_max_ms", std::move(ttft_max)},
            {"tpot_ms", std::move(tpot)},
            {"tpot_max_ms", std::move(tpot_max)}}},
          {"link", std::move(snap["link"])},
          {"kv", std::move(snap["kv"])},
          {"planner", std::move(snap["planner"])}};
}

}  // namespace tessera::router
