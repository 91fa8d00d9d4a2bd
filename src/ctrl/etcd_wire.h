// Wire helpers for etcd's v3 JSON gateway, shared by the etcd store and its watch stream: base64 for keys
// and values, 64-bit integers that arrive as strings, tolerant field access (etcd's answers are untrusted
// input: a wrong type must never throw on a watch or heartbeat thread), prefix ranges, and the splitter for
// the stream of concatenated JSON objects a watch answers with.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "ctrl/store.h"

namespace tessera::ctrl::etcd_wire {

using nlohmann::json;

inline constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

inline std::string b64_encode(std::string_view in) {
  std::string out;
  size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kB64[(v >> s) & 63];
  }
  if (size_t left = in.size() - i; left > 0) {
    uint32_t v = uint8_t(in[i]) << 16 | (left == 2 ? uint8_t(in[i + 1]) << 8 : 0);
    out += kB64[(v >> 18) & 63];
    out += kB64[(v >> 12) & 63];
    out += left == 2 ? kB64[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

inline Result<std::string> b64_decode(std::string_view in) {
  std::string out;
  uint32_t v = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    const char* p = std::strchr(kB64, c);
    if (!p || c == '\0') return data_loss("etcd sent invalid base64");
    v = (v << 6) | static_cast<uint32_t>(p - kB64);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((v >> bits) & 0xff);
    }
  }
  return out;
}

inline int64_t to_i64(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return 0;
  const json& v = j.at(key);
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_string()) {
    try {
      return std::stoll(v.get<std::string>());
    } catch (const std::exception&) {
      return 0;
    }
  }
  return 0;
}

// A string field, or "" when absent or not a string (etcd's answers are untrusted input: a wrong type must
// not throw on the watch thread).
inline std::string str_of(const json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The array under `key`, or an empty one.
inline const json& array_of(const json& j, const char* key) {
  static const json kEmpty = json::array();
  if (!j.is_object()) return kEmpty;
  auto it = j.find(key);
  return it != j.end() && it->is_array() ? *it : kEmpty;
}

// The object under `key`, or `j` itself when there is none (etcd wraps some answers in "result").
inline const json& result_of(const json& j) {
  if (!j.is_object()) return j;
  auto it = j.find("result");
  return it != j.end() && it->is_object() ? *it : j;
}

// The end of the key range holding every key with this prefix (etcd's convention).
inline std::string prefix_end(std::string prefix) {
  while (!prefix.empty()) {
    if (static_cast<uint8_t>(prefix.back()) < 0xff) {
      prefix.back() = static_cast<char>(prefix.back() + 1);
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');
}

inline Result<KeyValue> kv_from_etcd(const json& j) {
  if (!j.is_object()) return data_loss("etcd sent a key-value that is not an object");
  KeyValue kv;
  TS_ASSIGN_OR_RETURN(kv.key, b64_decode(str_of(j, "key")));
  TS_ASSIGN_OR_RETURN(kv.value, b64_decode(str_of(j, "value")));
  kv.mod_revision = to_i64(j, "mod_revision");
  kv.lease = LeaseId{to_i64(j, "lease")};
  return kv;
}

// Splits a stream of concatenated JSON objects; returns complete ones and keeps the rest in `buf`.
inline std::vector<json> take_objects(std::string& buf) {
  std::vector<json> out;
  int depth = 0;
  bool in_string = false, escape = false;
  size_t start = 0, consumed = 0;
  for (size_t i = 0; i < buf.size(); ++i) {
    char c = buf[i];
    if (in_string) {
      if (escape)
        escape = false;
      else if (c == '\\')
        escape = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"')
      in_string = true;
    else if (c == '{') {
      if (depth++ == 0) start = i;
    } else if (c == '}' && depth > 0 && --depth == 0) {
      json j = json::parse(buf.substr(start, i + 1 - start), nullptr, false);
      if (!j.is_discarded()) out.push_back(std::move(j));
      consumed = i + 1;
    }
  }
  buf.erase(0, consumed);
  return out;
}

}  // namespace tessera::ctrl::etcd_wire
