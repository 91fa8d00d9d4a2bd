// Typed reads of config.json keys, shared by the Hugging Face readers (hf_model.cc and the per-family files) and
// bert.cc: an absent or null key takes the fallback, a key of the wrong type or range is an InvalidArgument
// naming the file and the key, never an exception or a silent default.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "base/status.h"

namespace tessera::model::hf {

// A count or size: an integer in [0, max], or `fallback` when absent or null (nullopt: the key is required).
inline Result<int> int_key(const nlohmann::json& j, const char* key, std::optional<int> fallback,
                           const std::string& name, int64_t max = int64_t{1} << 30) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (fallback) return *fallback;
    return invalid_argument(fmt::format("{}: \"{}\" is missing", name, key));
  }
  if (!it->is_number_integer()) return invalid_argument(fmt::format("{}: \"{}\" is not an integer", name, key));
  const auto v = it->get<int64_t>();
  if (v < 0 || v > max) return invalid_argument(fmt::format("{}: \"{}\" = {} is out of range", name, key, v));
  return static_cast<int>(v);
}

// A finite number, or `fallback` when absent or null.
inline Result<double> num_key(const nlohmann::json& j, const char* key, double fallback, const std::string& name) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number() || !std::isfinite(it->get<double>()))
    return invalid_argument(fmt::format("{}: \"{}\" is not a number", name, key));
  return it->get<double>();
}

// A string, or `fallback` when absent or null.
inline Result<std::string> str_key(const nlohmann::json& j, const char* key, const std::string& fallback,
                                   const std::string& name) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_string()) return invalid_argument(fmt::format("{}: \"{}\" is not a string", name, key));
  return it->get<std::string>();
}

// A boolean as stated (nullopt when absent or null).
inline Result<std::optional<bool>> bool_key(const nlohmann::json& j, const char* key, const std::string& name) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::optional<bool>();
  if (!it->is_boolean()) return invalid_argument(fmt::format("{}: \"{}\" is not true or false", name, key));
  return std::optional<bool>(it->get<bool>());
}

// A boolean, or `fallback` when absent or null.
inline Result<bool> bool_or(const nlohmann::json& j, const char* key, bool fallback, const std::string& name) {
  TS_ASSIGN_OR_RETURN(std::optional<bool> v, bool_key(j, key, name));
  return v.value_or(fallback);
}

// Gemma's feed-forward activation (`hidden_activation`, or the older `hidden_act`; absent: gelu_pytorch_tanh): the
// tanh form of GELU is the one the engine computes for Gemma, anything else is Unimplemented by name.
inline Status check_gemma_activation(const nlohmann::json& j, const std::string& name) {
  std::string act = "gelu_pytorch_tanh";
  for (const char* k : {"hidden_activation", "hidden_act"})
    if (j.contains(k) && j[k].is_string()) {
      act = j[k].get<std::string>();
      break;
    }
  if (act != "gelu_pytorch_tanh" && act != "gelu_tanh")
    return unimplemented(fmt::format("{}: hidden_activation '{}' is not supported (gelu_pytorch_tanh is)", name, act));
  return ok_status();
}

}  // namespace tessera::model::hf
