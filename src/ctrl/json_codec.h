// JSON shapes shared by the embedded server and its client (nlohmann::json, included only by ctrl's .cc
// files that speak HTTP).
#pragma once

#include <nlohmann/json.hpp>

#include "ctrl/store.h"

namespace tessera::ctrl {

inline nlohmann::json kv_to_json(const KeyValue& kv) {
  return {{"key", kv.key},
          {"value", kv.value},
          {"mod_revision", kv.mod_revision},
          {"lease", static_cast<int64_t>(kv.lease)}};
}

inline KeyValue kv_from_json(const nlohmann::json& j) {
  KeyValue kv;
  kv.key = j.value("key", "");
  kv.value = j.value("value", "");
  kv.mod_revision = j.value("mod_revision", int64_t{0});
  kv.lease = LeaseId{j.value("lease", int64_t{0})};
  return kv;
}

inline nlohmann::json event_to_json(const WatchEvent& e) {
  nlohmann::json j = kv_to_json(e.kv);
  j["type"] = e.type == WatchEvent::Type::kPut ? "put" : "delete";
  return j;
}

inline WatchEvent event_from_json(const nlohmann::json& j) {
  WatchEvent e;
  e.type = j.value("type", "put") == "put" ? WatchEvent::Type::kPut : WatchEvent::Type::kDelete;
  e.kv = kv_from_json(j);
  return e;
}

}  // namespace tessera::ctrl
