// JsonFields: typed, range-checked reads of the fields of a JSON object that came from another process.
//
// Everything another node sends (a prefill reply, a /health body, a control-plane value) is untrusted input:
// nlohmann's `value()`/`get<T>()` throw type_error on a string where a number was expected, and an uncaught
// exception on a detached thread aborts the whole process. JsonFields never throws: each read checks the
// type and the range, records the first problem (naming the field) and returns a harmless value, so a caller
// reads every field it needs and then checks status() once:
//
//   JsonFields f(reply, "prefill reply");
//   uint64_t sum = f.uint("checksum");                       // required
//   double ms = f.number("compute_ms", 0, 1e9, 0.0);         // optional, default 0
//   if (!f.ok()) return f.status();                           // InvalidArgument naming the field
//
// Header-only; include it only from modules that already link nlohmann_json.
// Thread-safety: a JsonFields is used by one thread; the JSON it reads must outlive it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/status.h"

namespace tessera {

class JsonFields {
 public:
  using Json = nlohmann::json;

  // `what` names the message in errors ("prefill reply from http://...").
  JsonFields(const Json& j, std::string what) : j_(j), what_(std::move(what)) {
    if (!j_.is_object()) fail(fmt::format("{} is not a JSON object", what_));
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  bool has(std::string_view key) const { return j_.is_object() && j_.contains(key); }

  // A signed integer in [lo, hi]. Floats are refused: a count or id with a fraction is a bug or a forgery.
  int64_t integer(std::string_view key, int64_t lo = std::numeric_limits<int64_t>::min(),
                  int64_t hi = std::numeric_limits<int64_t>::max(), std::optional<int64_t> fallback = std::nullopt) {
    const Json* v = field(key, fallback.has_value());
    if (v == nullptr) return fallback.value_or(lo > 0 ? lo : (hi < 0 ? hi : 0));
    if (!v->is_number_integer()) return wrong(key, "an integer", fallback.value_or(0), lo, hi);
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return range(key, fmt::format("{}", v->get<uint64_t>()), lo, hi);
    }
    const int64_t x = v->get<int64_t>();
    if (x < lo || x > hi) return range(key, fmt::format("{}", x), lo, hi);
    return x;
  }

  // An unsigned integer in [0, hi] (a negative number is refused, not wrapped).
  uint64_t uint(std::string_view key, uint64_t hi = std::numeric_limits<uint64_t>::max(),
                std::optional<uint64_t> fallback = std::nullopt) {
    const Json* v = field(key, fallback.has_value());
    if (v == nullptr) return fallback.value_or(0);
    if (!v->is_number_integer()) {
      fail(fmt::format("{}: '{}' must be a non-negative integer, got {}", what_, key, describe(*v)));
      return 0;
    }
    if (!v->is_number_unsigned() && v->get<int64_t>() < 0) {
      fail(fmt::format("{}: '{}' must be a non-negative integer, got {}", what_, key, v->get<int64_t>()));
      return 0;
    }
    const uint64_t x = v->get<uint64_t>();
    if (x > hi) {
      fail(fmt::format("{}: '{}' = {} is above the limit {}", what_, key, x, hi));
      return 0;
    }
    return x;
  }

  // A finite number (integer or float) in [lo, hi].
  double number(std::string_view key, double lo, double hi, std::optional<double> fallback = std::nullopt) {
    const Json* v = field(key, fallback.has_value());
    if (v == nullptr) return fallback.value_or(0);
    if (!v->is_number()) {
      fail(fmt::format("{}: '{}' must be a number, got {}", what_, key, describe(*v)));
      return lo;
    }
    const double x = v->get<double>();
    if (!std::isfinite(x) || x < lo || x > hi) {
      fail(fmt::format("{}: '{}' = {} is outside [{}, {}]", what_, key, x, lo, hi));
      return lo;
    }
    return x;
  }

  // A string of at most max_bytes bytes.
  std::string string(std::string_view key, size_t max_bytes, std::optional<std::string> fallback = std::nullopt) {
    const Json* v = field(key, fallback.has_value());
    if (v == nullptr) return fallback.value_or("");
    if (!v->is_string()) {
      fail(fmt::format("{}: '{}' must be a string, got {}", what_, key, describe(*v)));
      return "";
    }
    const auto& s = v->get_ref<const std::string&>();
    if (s.size() > max_bytes) {
      fail(fmt::format("{}: '{}' is {} bytes, more than the {} allowed", what_, key, s.size(), max_bytes));
      return "";
    }
    return s;
  }

  bool boolean(std::string_view key, std::optional<bool> fallback = std::nullopt) {
    const Json* v = field(key, fallback.has_value());
    if (v == nullptr) return fallback.value_or(false);
    if (!v->is_boolean()) {
      fail(fmt::format("{}: '{}' must be true or false, got {}", what_, key, describe(*v)));
      return false;
    }
    return v->get<bool>();
  }

  // The array or object under `key` (nullptr when absent and optional, or on a type error).
  const Json* array(std::string_view key, size_t max_items, bool optional = false) {
    const Json* v = field(key, optional);
    if (v == nullptr) return nullptr;
    if (!v->is_array()) {
      fail(fmt::format("{}: '{}' must be an array, got {}", what_, key, describe(*v)));
      return nullptr;
    }
    if (v->size() > max_items) {
      fail(fmt::format("{}: '{}' has {} items, more than the {} allowed", what_, key, v->size(), max_items));
      return nullptr;
    }
    return v;
  }
  const Json* object(std::string_view key, bool optional = false) {
    const Json* v = field(key, optional);
    if (v == nullptr) return nullptr;
    if (!v->is_object()) {
      fail(fmt::format("{}: '{}' must be an object, got {}", what_, key, describe(*v)));
      return nullptr;
    }
    return v;
  }

  // Records a caller's own check (e.g. a cross-field one); the first failure wins.
  void fail(std::string message) {
    if (status_.ok()) status_ = invalid_argument(std::move(message));
  }

  static std::string describe(const Json& v) {
    switch (v.type()) {
      case Json::value_t::null:
        return "null";
      case Json::value_t::string:
        return "a string";
      case Json::value_t::boolean:
        return "a boolean";
      case Json::value_t::array:
        return "an array";
      case Json::value_t::object:
        return "an object";
      case Json::value_t::number_float:
        return fmt::format("the number {}", v.get<double>());
      default:
        return "a number";
    }
  }

 private:
  const Json* field(std::string_view key, bool optional) {
    if (!j_.is_object()) return nullptr;
    auto it = j_.find(key);
    if (it == j_.end() || (optional && it->is_null())) {
      if (!optional) fail(fmt::format("{}: '{}' is missing", what_, key));
      return nullptr;
    }
    return &*it;
  }
  int64_t wrong(std::string_view key, const char* want, int64_t fallback, int64_t lo, int64_t hi) {
    fail(fmt::format("{}: '{}' must be {}, got {}", what_, key, want, describe(*j_.find(key))));
    return std::clamp(fallback, lo, hi);
  }
  int64_t range(std::string_view key, const std::string& got, int64_t lo, int64_t hi) {
    fail(fmt::format("{}: '{}' = {} is outside [{}, {}]", what_, key, got, lo, hi));
    return lo > 0 ? lo : (hi < 0 ? hi : 0);
  }

  const Json& j_;
  const std::string what_;
  Status status_;
};

}  // namespace tessera
