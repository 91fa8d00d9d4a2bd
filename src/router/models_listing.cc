#include "router/models_listing.h"

#include <algorithm>
#include <future>
#include <set>

#include <fmt/format.h>

#include "base/status.h"
#include "http/http.h"

namespace tessera::router {

using nlohmann::json;

std::vector<std::string> urls_of(const std::vector<NodeSnapshot>& nodes) {
  std::vector<std::string> urls;
  for (const NodeSnapshot& n : nodes) urls.push_back(n.url);
  return urls;
}

std::string unknown_model_error(const std::string& model, const std::vector<std::string>& served) {
  return json{
      {"error",
       {{"message", fmt::format("The model '{}' does not exist; this router serves {}", model, json(served).dump())},
        {"type", "invalid_request_error"},
        {"param", "model"},
        {"code", "model_not_found"}}}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

json list_models(const std::vector<std::string>& urls, const ModelsListingOptions& options) {
  std::vector<Result<http::Response>> answers;
  const size_t fanout = std::max<size_t>(1, options.fanout);
  for (size_t at = 0; at < urls.size(); at += fanout) {
    std::vector<std::future<Result<http::Response>>> batch;
    for (size_t i = at; i < std::min(urls.size(), at + fanout); ++i) {
      batch.push_back(std::async(std::launch::async, [&options, url = urls[i]] {
        http::ClientRequest req;
        http::add_cluster_token(req.headers, options.cluster_token);
        req.tls_ca_file = options.tls_ca_file;
        req.url = url + "/v1/models";
        req.timeout_ms = options.timeout_ms;
        return http::fetch(req);
      }));
    }
    for (auto& f : batch) answers.push_back(f.get());
  }
  json data = json::array();
  std::set<std::string> seen;
  for (auto& r : answers) {
    if (!r.ok() || r->status != 200) continue;
    json j = json::parse(r->body, nullptr, false);
    if (!j.is_object() || !j.contains("data") || !j["data"].is_array()) continue;
    for (auto& m : j["data"]) {
      if (!m.is_object() || !m.contains("id") || !m["id"].is_string()) continue;
      if (seen.insert(m["id"].get<std::string>()).second) data.push_back(m);
    }
  }
  return data;
}

}  // namespace tessera::router
