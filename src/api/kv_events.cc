#include "api/kv_events.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace tessera::api {

using nlohmann::json;

std::string kv_events_body(const KvEventsBody& b) {
  json j = {{"epoch", b.epoch}, {"last", b.last}, {"block_tokens", b.block_tokens}, {"reset", b.reset}};
  if (b.reset) {
    json held = json::object();
    for (int t = 0; t < kKvTiers; ++t) held[kKvTierNames[t]] = b.held[t];
    j["held"] = std::move(held);
  } else {
    json events = json::array();
    for (const KvBlockEvent& e : b.events)
      events.push_back({e.seq, e.stored ? "stored" : "removed", e.hash, kKvTierNames[e.tier]});
    j["events"] = std::move(events);
  }
  return j.dump();
}

Result<KvEventsBody> parse_kv_events(std::string_view body) {
  constexpr size_t kMaxEntries = 1 << 22;
  auto bad = [](std::string_view what) { return invalid_argument(fmt::format("kv events: {}", what)); };
  json j = json::parse(body, nullptr, false);
  if (!j.is_object()) return bad("not a JSON object");
  for (const char* k : {"epoch", "last", "block_tokens"}) {
    if (!j.contains(k) || !j[k].is_number_unsigned()) return bad(fmt::format("'{}' must be an unsigned integer", k));
  }
  if (!j.contains("reset") || !j["reset"].is_boolean()) return bad("'reset' must be true or false");
  KvEventsBody b;
  b.epoch = j["epoch"].get<uint64_t>();
  b.last = j["last"].get<uint64_t>();
  b.reset = j["reset"].get<bool>();
  const uint64_t bt = j["block_tokens"].get<uint64_t>();
  if (bt == 0 || bt > (1u << 20)) return bad("'block_tokens' out of range");
  b.block_tokens = static_cast<int>(bt);
  if (b.reset) {
    if (!j.contains("held") || !j["held"].is_object()) return bad("a reset carries 'held', block hashes by tier");
    for (int t = 0; t < kKvTiers; ++t) {
      const json& held = j["held"];
      if (!held.contains(kKvTierNames[t])) continue;
      const json& list = held[kKvTierNames[t]];
      if (!list.is_array() || list.size() > kMaxEntries)
        return bad(fmt::format("held '{}' must be a list of block hashes", kKvTierNames[t]));
      for (const json& h : list) {
        if (!h.is_number_unsigned()) return bad("a held block hash must be an unsigned integer");
        b.held[t].push_back(h.get<uint64_t>());
      }
    }
    return b;
  }
  if (!j.contains("events") || !j["events"].is_array() || j["events"].size() > kMaxEntries)
    return bad("'events' must be a list");
  for (const json& e : j["events"]) {
    if (!e.is_array() || e.size() != 4 || !e[0].is_number_unsigned() || !e[1].is_string() ||
        !e[2].is_number_unsigned() || !e[3].is_string())
      return bad("an event is [seq, \"stored\"|\"removed\", hash, tier]");
    const std::string type = e[1].get<std::string>(), tier = e[3].get<std::string>();
    if (type != "stored" && type != "removed") return bad(fmt::format("unknown event type '{}'", type));
    int t = 0;
    while (t < kKvTiers && tier != kKvTierNames[t]) ++t;
    if (t == kKvTiers) return bad(fmt::format("unknown tier '{}'", tier));
    b.events.push_back({e[0].get<uint64_t>(), type == "stored", e[2].get<uint64_t>(), t});
  }
  return b;
}

}  // namespace tessera::api
