#include "model/formats/safetensors/safetensors_file.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

namespace tessera::model {
namespace {

using Json = nlohmann::json;

Result<DType> parse_st_dtype(const std::string& s) {
  if (s == "F32") return DType::kF32;
  if (s == "F16") return DType::kF16;
  if (s == "BF16") return DType::kBF16;
  return unimplemented(fmt::format("safetensors dtype {} is not supported (F32, F16, BF16 are)", s));
}

const char* st_dtype_name(DType d) {
  switch (d) {
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    default:
      return "F32";
  }
}

std::string json_escape(const std::string& s) { return Json(s).dump(); }

}  // namespace

Result<SafetensorsContents> parse_safetensors(std::span<const uint8_t> bytes, const std::string& name) {
  auto bad = [&](const std::string& what) {
    return invalid_argument(fmt::format("{} is not a valid safetensors file: {}", name, what));
  };
  if (bytes.size() < 8) return bad("shorter than the 8-byte header length");
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  if (n > bytes.size() - 8)
    return bad(fmt::format("header length {} is beyond the end of the file ({} bytes)", n, bytes.size()));
  if (n > (uint64_t{100} << 20)) return bad(fmt::format("header length {} exceeds 100 MiB", n));
  const char* h = reinterpret_cast<const char*>(bytes.data() + 8);
  Json j = Json::parse(h, h + n, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return bad("the header is not a JSON object");
  const uint8_t* data = bytes.data() + 8 + n;
  const uint64_t data_size = bytes.size() - 8 - n;
  SafetensorsContents c;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const Json& v = it.value();
    if (it.key() == "__metadata__") {
      if (!v.is_object()) return bad("__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m)
        if (m.value().is_string()) c.metadata[m.key()] = m.value().get<std::string>();
      continue;
    }
    SafetensorsTensor t;
    t.name = it.key();
    if (!v.is_object() || !v.contains("dtype") || !v["dtype"].is_string() || !v.contains("shape") ||
        !v["shape"].is_array() || !v.contains("data_offsets") || !v["data_offsets"].is_array() ||
        v["data_offsets"].size() != 2)
      return bad(fmt::format("tensor {} lacks dtype, shape or data_offsets", t.name));
    auto dt = parse_st_dtype(v["dtype"].get<std::string>());
    if (!dt.ok()) return dt.status().with_context(fmt::format("{}: tensor {}", name, t.name));
    t.dtype = *dt;
    uint64_t numel = 1;
    if (v["shape"].size() > 8) return bad(fmt::format("tensor {} has {} dimensions", t.name, v["shape"].size()));
    for (const Json& d : v["shape"]) {
      if (!d.is_number_unsigned()) return bad(fmt::format("tensor {} has a negative or non-integer dimension", t.name));
      uint64_t x = d.get<uint64_t>();
      if (x > (uint64_t{1} << 40) || (x != 0 && numel > (uint64_t{1} << 42) / x))
        return bad(fmt::format("tensor {} has an implausible shape", t.name));
      numel *= x;
      t.shape.push_back(static_cast<int64_t>(x));
    }
    const Json& off = v["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      return bad(fmt::format("tensor {}: data_offsets are not non-negative integers", t.name));
    uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
    if (b > e || e > data_size)
      return bad(fmt::format("tensor {}: data_offsets [{}, {}] are outside the data section of {} bytes", t.name, b, e,
                             data_size));
    t.bytes = dtype_bytes(t.dtype, static_cast<size_t>(numel));
    if (e - b != t.bytes)
      return bad(fmt::format("tensor {}: data_offsets span {} bytes but {} {} values need {}", t.name, e - b, numel,
                             dtype_name(t.dtype), t.bytes));
    t.data = data + b;
    c.tensors.push_back(std::move(t));
  }
  std::sort(c.tensors.begin(), c.tensors.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) { return a.data < b.data; });
  return c;
}

Status write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      header += fmt::format("{}{}:{}", first ? "" : ",", json_escape(k), json_escape(v));
      first = false;
    }
    header += "}";
  }
  uint64_t offset = 0;
  for (const SafetensorsTensor& t : tensors) {
    if (t.dtype != DType::kF32 && t.dtype != DType::kF16 && t.dtype != DType::kBF16)
      return invalid_argument(fmt::format("safetensors cannot hold {} tensor {}", dtype_name(t.dtype), t.name));
    std::string shape;
    for (size_t i = 0; i < t.shape.size(); ++i) shape += fmt::format("{}{}", i ? "," : "", t.shape[i]);
    header +=
        fmt::format("{}{}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}", header.size() > 1 ? "," : "",
                    json_escape(t.name), st_dtype_name(t.dtype), shape, offset, offset + t.bytes);
    offset += t.bytes;
  }
  header += "}";
  while (header.size() % 8) header += ' ';
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return unavailable(fmt::format("cannot write {}", tmp));
    uint64_t n = header.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    for (const SafetensorsTensor& t : tensors)
      out.write(reinterpret_cast<const char*>(t.data), static_cast<std::streamsize>(t.bytes));
    out.flush();
    if (!out) return unavailable(fmt::format("failed writing {} (disk full?)", tmp));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return unavailable(fmt::format("cannot rename {} to {}: {}", tmp, path, ec.message()));
  return ok_status();
}

}  // namespace tessera::model
