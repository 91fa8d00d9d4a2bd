// GGUF v3 container: parse and write the header (metadata key/values, tensor table) of llama.cpp's format.
//
// Layout (little-endian): "GGUF", uint32 version (3), uint64 tensor count, uint64 metadata count, the
// metadata (gguf string key, uint32 value type, value), the tensor infos (name, uint32 n_dims, n_dims x
// uint64 ne with ne[0] the fastest-varying dimension, uint32 ggml type, uint64 offset into the data
// section), padding to `general.alignment` (default 32), then the data section.
//
// parse_gguf() never trusts the file: every length, count, dimension and offset is checked against the
// bytes actually present before it is used, so a corrupt or hostile file is an InvalidArgument naming the
// file and the byte offset, never a crash or a huge allocation. Tensor data is not copied: tensors point
// into the caller's bytes.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"

namespace tessera::model {

enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// One metadata value. Scalars use the field matching their type family; arrays of numbers fill `ints` or
// `floats`, arrays of strings `strings` (nested arrays are rejected as unsupported).
struct GgufValue {
  GgufType type = GgufType::kUint32;
  GgufType elem_type = GgufType::kUint32;  // arrays only
  int64_t i = 0;                           // all integer types and bool (uint64 values above INT64_MAX wrap)
  double f = 0.0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;

  bool is_integer() const;
  bool is_float() const { return type == GgufType::kFloat32 || type == GgufType::kFloat64; }
  size_t array_size() const;

  static GgufValue u32(uint32_t v);
  static GgufValue i32(int32_t v);
  static GgufValue f32(float v);
  static GgufValue boolean(bool v);
  static GgufValue str(std::string v);
  static GgufValue string_array(std::vector<std::string> v);
  static GgufValue f32_array(std::vector<float> v);
  static GgufValue i32_array(std::vector<int32_t> v);
};

struct GgufTensor {
  std::string name;
  std::vector<int64_t> ne;  // GGUF order: ne[0] is the row length
  DType dtype = DType::kF32;
  uint64_t offset = 0;  // into the data section
  size_t bytes = 0;
  const uint8_t* data = nullptr;  // into the parsed bytes (reader); the bytes to write (writer)

  // Row-major shape as weights.h uses it: ne reversed.
  std::vector<int64_t> shape() const { return {ne.rbegin(), ne.rend()}; }
};

struct GgufContents {
  uint32_t version = 3;
  uint64_t alignment = 32;
  std::vector<std::string> keys;  // in file order
  std::map<std::string, GgufValue> metadata;
  std::vector<GgufTensor> tensors;

  const GgufValue* find(const std::string& key) const;
  // Typed access; NotFound when the key is absent, InvalidArgument when it has another type.
  Result<int64_t> get_int(const std::string& key) const;
  Result<double> get_float(const std::string& key) const;  // accepts integers too
  Result<std::string> get_string(const std::string& key) const;
};

// ggml type ids of the tensor types Tessera reads and writes; errors name the type ("GGUF tensor type 16
// (IQ2_XXS) is not supported ...", "type 99 is unknown"). ggml_type_name() is null for an unknown id.
const char* ggml_type_name(uint32_t ggml_type);
Result<DType> dtype_from_ggml_type(uint32_t ggml_type);
uint32_t ggml_type_of(DType dtype);

Result<GgufContents> parse_gguf(std::span<const uint8_t> bytes, const std::string& name);

// Writes a GGUF v3 file (alignment 32) with the metadata in `keys` order and the tensors' data from
// GgufTensor::data; offsets are assigned here. Writes to a temporary file and renames it into place.
Status write_gguf(const std::string& path, const std::vector<std::pair<std::string, GgufValue>>& metadata,
                  const std::vector<GgufTensor>& tensors);

}  // namespace tessera::model
