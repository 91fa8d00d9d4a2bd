#include "api/kv_events.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace tessera::api {

using nlohmann::json;

std::string kv_events_body(const KvEventsBody& b) {
  json j = {{"epoch", b.epoch}, {"last", b.last}, {"block_tokens", b.block_tokens}, {"reset", b.reset}};
  if (b.states) j["states"] = true;
  if (b.reset) {
    json held = json::object(), states = json::object();
    for (int t = 0; t < kKvTiers; ++t) {
      held[kKvTierNames[t]] = b.held[t];
      states[kKvTierNames[t]] = b.held_states[t];
    }
    j["held"] = std::move(held);
    if (b.states) j["held_states"] = std::move(states);
  } else {
    json events = json::array();
    for (const KvBlockEvent& e : b.events) {
      json ev = {e.seq, e.stored ? "stored" : "removed", e.hash, kKvTierNames[e.tier]};
      if (e.state) ev.push_back("state");
      events.push_back(std::move(ev));
    }
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
  if (j.contains("states")) {
    if (!j["states"].is_boolean()) return bad("'states' must be true or false");
    b.states = j["states"].get<bool>();
  }
  // "held" / "held_states": block hashes by tier.
  auto read_held = [&](const char* key, std::vector<uint64_t>* out) -> Status {
    const json& held = j[key];
    for (int t = 0; t < kKvTiers; ++t) {
      if (!held.contains(kKvTierNames[t])) continue;
      const json& list = held[kKvTierNames[t]];
      if (!list.is_array() || list.size() > kMaxEntries)
        return bad(fmt::format("{} '{}' must be a list of block hashes", key, kKvTierNames[t]));
      for (const json& h : list) {
        if (!h.is_number_unsigned()) return bad(fmt::format("a {} block hash must be an unsigned integer", key));
        out[t].push_back(h.get<uint64_t>());
      }
    }
    return ok_status();
  };
  if (b.reset) {
    if (!j.contains("held") || !j["held"].is_object()) return bad("a reset carries 'held', block hashes by tier");
    TS_RETURN_IF_ERROR(read_held("held", b.held));
    if (j.contains("held_states")) {
      if (!j["held_states"].is_object()) return bad("'held_states' must be block hashes by tier");
      TS_RETURN_IF_ERROR(read_held("held_states", b.held_states));
    }
    return b;
  }
  if (!j.contains("events") || !j["events"].is_array() || j["events"].size() > kMaxEntries)
    return bad("'events' must be a list");
  for (const json& e : j["events"]) {
    if (!e.is_array() || e.size() < 4 || e.size() > 5 || !e[0].is_number_unsigned() || !e[1].is_string() ||
        !e[2].is_number_unsigned() || !e[3].is_string() || (e.size() == 5 && e[4] != "state"))
      return bad("an event is [seq, \"stored\"|\"removed\", hash, tier] or [..., tier, \"state\"]");
    const std::string type = e[1].get<std::string>(), tier = e[3].get<std::string>();
    if (type != "stored" && type != "removed") return bad(fmt::format("unknown event type '{}'", type));
    int t = 0;
    while (t < kKvTiers && tier != kKvTierNames[t]) ++t;
    if (t == kKvTiers) return bad(fmt::format("unknown tier '{}'", tier));
    b.events.push_back({e[0].get<uint64_t>(), type == "stored", e[2].get<uint64_t>(), t, e.size() == 5});
  }
  return b;
}

}  // namespace tessera::api
