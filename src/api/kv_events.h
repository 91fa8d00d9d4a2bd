// The KV events wire format: GET /internal/kv/events?epoch=E&after=S on a node (serve/kv_events_api.h), read by the
// router's exact prefix index (router/kv_event_index.h). What the events mean is engine/kv_events.h.
//
//   200 {"epoch": E, "last": S, "block_tokens": B, "reset": false,
//        "events": [[seq, "stored"|"removed", hash, "device"|"host"|"disk"], ...]}
//   200 {"epoch": E, "last": S, "block_tokens": B, "reset": true,
//        "held": {"device": [hash, ...], "host": [...], "disk": [...]}}
//
// A hybrid model's node (engine/kv_events.h) adds "states": true to every answer; its state events name the block
// the state follows and end in "state" ([seq, "stored", hash, "host", "state"]), and a reset adds "held_states"
// (the same form as "held"). A reader may use such a node's prefix only up to a block with a state.
//
// `reset`: the reader is new, read another run of the node, or fell behind what the node keeps; `held` is then
// every block the node holds, and the reader follows from `last`. Hashes and numbers are unsigned 64-bit JSON
// integers.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace tessera::api {

inline constexpr std::string_view kKvEventsPath = "/internal/kv/events";

inline constexpr int kKvTiers = 3;  // device, host, disk: the order of KvEventsBody::held
inline constexpr const char* kKvTierNames[kKvTiers] = {"device", "host", "disk"};

struct KvBlockEvent {
  uint64_t seq = 0;
  bool stored = true;  // false: removed
  uint64_t hash = 0;
  int tier = 0;        // index into kKvTierNames
  bool state = false;  // the state after block `hash`
};

struct KvEventsBody {
  uint64_t epoch = 0;
  uint64_t last = 0;
  int block_tokens = 0;
  bool reset = false;
  std::vector<KvBlockEvent> events;
  std::vector<uint64_t> held[kKvTiers];
  bool states = false;  // a hybrid model's node
  std::vector<uint64_t> held_states[kKvTiers];
};

std::string kv_events_body(const KvEventsBody& b);
// InvalidArgument naming what is wrong; never throws on hostile input.
Result<KvEventsBody> parse_kv_events(std::string_view body);

}  // namespace tessera::api
