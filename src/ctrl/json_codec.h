// JSON shapes shared by the embedded server and its client (nlohmann::json, included only by ctrl's .cc
// files that speak HTTP).
#pragma once

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/json_fields.h"

#include "ctrl/store.h"

namespace tessera::ctrl {

inline nlohmann::json kv_to_json(const KeyValue& kv) {
  return {{"key", kv.key},
          {"value", kv.value},
          {"mod_revision", kv.mod_revision},
          {"lease", static_cast<int64_t>(kv.lease)}};
}

// Limits a decoded entry must respect (the server enforces the same on put; see memory_core.h): a value
// beyond them did not come from a well-behaved store.
inline constexpr size_t kMaxDecodedKeyBytes = 64 << 10;
inline constexpr size_t kMaxDecodedValueBytes = 16 << 20;

// Store answers are untrusted input: a wrong type is an InvalidArgument, never an exception.
inline Result<KeyValue> kv_from_json(const nlohmann::json& j) {
  JsonFields f(j, "ctrl entry");
  KeyValue kv;
  kv.key = f.string("key", kMaxDecodedKeyBytes);
  kv.value = f.string("value", kMaxDecodedValueBytes, "");
  kv.mod_revision = f.integer("mod_revision", 0, INT64_MAX, 0);
  kv.lease = LeaseId{f.integer("lease", 0, INT64_MAX, 0)};
  if (!f.ok()) return f.status();
  return kv;
}

inline nlohmann::json event_to_json(const WatchEvent& e) {
  nlohmann::json j = kv_to_json(e.kv);
  j["type"] = e.type == WatchEvent::Type::kPut ? "put" : "delete";
  return j;
}

inline Result<WatchEvent> event_from_json(const nlohmann::json& j) {
  JsonFields f(j, "ctrl event");
  const std::string type = f.string("type", 16, "put");
  if (f.ok() && type != "put" && type != "delete") f.fail(fmt::format("ctrl event: unknown type '{}'", type));
  if (!f.ok()) return f.status();
  WatchEvent e;
  e.type = type == "put" ? WatchEvent::Type::kPut : WatchEvent::Type::kDelete;
  TS_ASSIGN_OR_RETURN(e.kv, kv_from_json(j));
  return e;
}

}  // namespace tessera::ctrl
