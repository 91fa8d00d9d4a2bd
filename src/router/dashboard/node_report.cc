// Node reports (node_report.h). The Prometheus text parser handles what serve/ writes (and the text format's
// escapes in label values); it is not a general exposition-format parser: timestamps and exemplars are ignored.
#include "router/dashboard/node_report.h"

#include <cmath>
#include <cstdlib>

#include <nlohmann/json.hpp>

namespace tessera::router {
namespace {

constexpr size_t kMaxLabel = 512;     // a label value longer than this is not a node URL
constexpr size_t kMaxPeers = 256;     // prefill peers believed per decode node
constexpr double kMaxCounter = 1e18;  // bytes; beyond it a counter is not believed
constexpr int64_t kMaxCount = 1LL << 40;

using json = nlohmann::json;

int64_t count_field(const json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_number_integer()) return -1;
  const int64_t v = j[key].get<int64_t>();
  return v >= 0 && v <= kMaxCount ? v : -1;
}

std::string text_field(const json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_string()) return "";
  std::string s = j[key].get<std::string>();
  return s.size() <= kMaxLabel ? s : s.substr(0, kMaxLabel);
}

bool is_name_char(char c, bool first) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' || (!first && c >= '0' && c <= '9');
}

}  // namespace

Status parse_node_health(std::string_view body, NodeReport& out) {
  const json j = json::parse(body, nullptr, false);
  if (!j.is_object()) return invalid_argument("/health is not a JSON object");
  out.model = text_field(j, "model");
  out.backend = text_field(j, "backend");
  out.device = text_field(j, "device");
  out.kv_blocks_used = count_field(j, "kv_blocks_used");
  out.kv_blocks_total = count_field(j, "kv_blocks_total");
  out.waiting = count_field(j, "waiting");
  out.running = count_field(j, "running");
  if (out.kv_blocks_used > out.kv_blocks_total) out.kv_blocks_used = out.kv_blocks_total = -1;
  return ok_status();
}

bool parse_prom_line(std::string_view line, PromSample& out) {
  out = PromSample{};
  size_t i = 0;
  while (i < line.size() && is_name_char(line[i], i == 0)) ++i;
  if (i == 0) return false;
  out.name = std::string(line.substr(0, i));
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (true) {
      while (i < line.size() && (line[i] == ' ' || line[i] == ',')) ++i;
      if (i < line.size() && line[i] == '}') {
        ++i;
        break;
      }
      const size_t key_start = i;
      while (i < line.size() && is_name_char(line[i], i == key_start)) ++i;
      if (i == key_start || i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"') return false;
      std::string key(line.substr(key_start, i - key_start));
      i += 2;
      std::string value;
      for (;; ++i) {
        if (i >= line.size() || value.size() > kMaxLabel) return false;
        const char c = line[i];
        if (c == '"') break;
        if (c == '\\') {
          if (++i >= line.size()) return false;
          value += line[i] == 'n' ? '\n' : line[i];
        } else {
          value += c;
        }
      }
      ++i;
      out.labels[std::move(key)] = std::move(value);
    }
  }
  if (i >= line.size() || line[i] != ' ') return false;
  const std::string rest(line.substr(i + 1));
  char* end = nullptr;
  out.value = std::strtod(rest.c_str(), &end);
  if (end == rest.c_str() || (*end != '\0' && *end != ' ')) return false;
  return true;
}

void parse_node_metrics(std::string_view text, NodeReport& out) {
  PromSample s;
  size_t at = 0;
  while (at < text.size()) {
    size_t nl = text.find('\n', at);
    if (nl == std::string_view::npos) nl = text.size();
    const std::string_view line = text.substr(at, nl - at);
    at = nl + 1;
    if (line.empty() || line[0] == '#' || !parse_prom_line(line, s)) continue;
    if (!std::isfinite(s.value) || s.value < 0 || s.value > kMaxCounter) continue;
    if (s.name == "tessera_pd_kv_bytes_total" && s.labels.empty()) {
      out.kv_bytes_received = s.value;
    } else if (s.name == "tessera_pd_kv_bytes_from_total") {
      auto it = s.labels.find("prefill");
      if (it == s.labels.end() || it->second.empty()) continue;
      if (out.kv_bytes_from.size() >= kMaxPeers && out.kv_bytes_from.count(it->second) == 0) continue;
      out.kv_bytes_from[it->second] = s.value;
    } else if (s.name == "tessera_prefix_cache_tier_hit_rate") {
      auto it = s.labels.find("tier");
      if (it == s.labels.end() || (it->second != "device" && it->second != "host" && it->second != "disk")) continue;
      if (s.value <= 1) out.tier_hit_rate[it->second] = s.value;
    }
  }
}

}  // namespace tessera::router
