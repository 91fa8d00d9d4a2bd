#include "api/health.h"

#include <nlohmann/json.hpp>

namespace tessera::api {

using json = nlohmann::json;

std::string health_body(const NodeHealth& h) {
  return json{{"status", "ok"},
              {"model", h.model},
              {"models", h.models.empty() ? std::vector<std::string>{h.model} : h.models},
              {"backend", h.backend},
              {"device", h.device},
              {"runner", h.runner},
              {"waiting", h.waiting},
              {"running", h.running},
              {"kv_blocks_used", h.kv_blocks_used},
              {"kv_blocks_total", h.kv_blocks_total}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

double health_capacity(std::string_view body) {
  json j = json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("kv_blocks_total") || !j["kv_blocks_total"].is_number()) return 0;
  const double blocks = j["kv_blocks_total"].get<double>();
  return blocks > 0 && blocks <= kMaxReportedBlocks ? blocks : 0;
}

std::string health_runner(std::string_view body) {
  json j = json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("runner") || !j["runner"].is_string()) return {};
  const std::string r = j["runner"].get<std::string>();
  return r == "generate" || r == "pooling" ? r : std::string();
}

std::vector<std::string> health_models(std::string_view body) {
  constexpr size_t kMaxNames = 64, kMaxNameBytes = 1024;
  json j = json::parse(body, nullptr, false);
  std::vector<std::string> names;
  if (!j.is_object()) return names;
  auto take = [&](const json& v) {
    if (v.is_string() && !v.get<std::string>().empty() && v.get<std::string>().size() <= kMaxNameBytes &&
        names.size() < kMaxNames)
      names.push_back(v.get<std::string>());
  };
  if (j.contains("models") && j["models"].is_array()) {
    for (const json& v : j["models"]) take(v);
  } else if (j.contains("model")) {
    take(j["model"]);
  }
  return names;
}

}  // namespace tessera::api
