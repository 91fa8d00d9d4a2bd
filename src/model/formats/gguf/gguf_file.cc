#include "model/formats/gguf/gguf_file.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include <fmt/core.h>

#include "base/check.h"

namespace tessera::model {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian uint32
constexpr int kMaxDims = 4;              // GGML_MAX_DIMS

// Cursor over untrusted bytes: every read checks the remaining length first.
class Reader {
 public:
  Reader(std::span<const uint8_t> b, const std::string& name) : b_(b), name_(name) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return b_.size() - pos_; }
  Status error(const std::string& what) const {
    return invalid_argument(fmt::format("{} is not a valid GGUF file: {} at byte {}", name_, what, pos_));
  }
  template <typename T>
  Result<T> read() {
    if (remaining() < sizeof(T))
      return error(fmt::format("truncated ({} bytes needed, {} left)", sizeof(T), remaining()));
    T v;
    std::memcpy(&v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  Result<std::string> read_string() {
    TS_ASSIGN_OR_RETURN(uint64_t n, read<uint64_t>());
    if (n > remaining()) return error(fmt::format("string of {} bytes runs past the end of the file", n));
    std::string s(reinterpret_cast<const char*>(b_.data() + pos_), static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return s;
  }

 private:
  std::span<const uint8_t> b_;
  const std::string& name_;
  size_t pos_ = 0;
};

size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
      return 8;
    default:
      return 0;
  }
}

Result<int64_t> read_int(Reader& r, GgufType t) {
  switch (t) {
    case GgufType::kUint8: {
      TS_ASSIGN_OR_RETURN(uint8_t v, r.read<uint8_t>());
      return int64_t{v};
    }
    case GgufType::kInt8: {
      TS_ASSIGN_OR_RETURN(int8_t v, r.read<int8_t>());
      return int64_t{v};
    }
    case GgufType::kBool: {
      TS_ASSIGN_OR_RETURN(uint8_t v, r.read<uint8_t>());
      if (v > 1) return r.error(fmt::format("bool value {}", v));
      return int64_t{v};
    }
    case GgufType::kUint16: {
      TS_ASSIGN_OR_RETURN(uint16_t v, r.read<uint16_t>());
      return int64_t{v};
    }
    case GgufType::kInt16: {
      TS_ASSIGN_OR_RETURN(int16_t v, r.read<int16_t>());
      return int64_t{v};
    }
    case GgufType::kUint32: {
      TS_ASSIGN_OR_RETURN(uint32_t v, r.read<uint32_t>());
      return int64_t{v};
    }
    case GgufType::kInt32: {
      TS_ASSIGN_OR_RETURN(int32_t v, r.read<int32_t>());
      return int64_t{v};
    }
    case GgufType::kUint64: {
      TS_ASSIGN_OR_RETURN(uint64_t v, r.read<uint64_t>());
      return static_cast<int64_t>(v);
    }
    case GgufType::kInt64:
      return r.read<int64_t>();
    default:
      return r.error("internal: not an integer type");
  }
}

Result<double> read_float(Reader& r, GgufType t) {
  if (t == GgufType::kFloat32) {
    TS_ASSIGN_OR_RETURN(float v, r.read<float>());
    return double{v};
  }
  return r.read<double>();
}

Result<GgufValue> read_value(Reader& r, GgufType t) {
  GgufValue v;
  v.type = t;
  if (t == GgufType::kString) {
    TS_ASSIGN_OR_RETURN(v.s, r.read_string());
  } else if (t == GgufType::kFloat32 || t == GgufType::kFloat64) {
    TS_ASSIGN_OR_RETURN(v.f, read_float(r, t));
  } else if (t == GgufType::kArray) {
    TS_ASSIGN_OR_RETURN(uint32_t et, r.read<uint32_t>());
    TS_ASSIGN_OR_RETURN(uint64_t n, r.read<uint64_t>());
    v.elem_type = static_cast<GgufType>(et);
    if (v.elem_type == GgufType::kArray) return r.error("nested arrays are not supported");
    // Each element takes at least one byte (8 for a string's length), so a count beyond the remaining bytes
    // is a lie; checking first keeps a hostile count from allocating.
    size_t min_elem = v.elem_type == GgufType::kString ? 8 : scalar_size(v.elem_type);
    if (min_elem == 0) return r.error(fmt::format("unknown array element type {}", et));
    if (n > r.remaining() / min_elem) return r.error(fmt::format("array of {} elements runs past the end", n));
    if (v.elem_type == GgufType::kString) {
      v.strings.reserve(static_cast<size_t>(n));
      for (uint64_t k = 0; k < n; ++k) {
        TS_ASSIGN_OR_RETURN(std::string s, r.read_string());
        v.strings.push_back(std::move(s));
      }
    } else if (v.elem_type == GgufType::kFloat32 || v.elem_type == GgufType::kFloat64) {
      v.floats.reserve(static_cast<size_t>(n));
      for (uint64_t k = 0; k < n; ++k) {
        TS_ASSIGN_OR_RETURN(double x, read_float(r, v.elem_type));
        v.floats.push_back(x);
      }
    } else {
      v.ints.reserve(static_cast<size_t>(n));
      for (uint64_t k = 0; k < n; ++k) {
        TS_ASSIGN_OR_RETURN(int64_t x, read_int(r, v.elem_type));
        v.ints.push_back(x);
      }
    }
  } else if (scalar_size(t) != 0) {
    TS_ASSIGN_OR_RETURN(v.i, read_int(r, t));
  } else {
    return r.error(fmt::format("unknown value type {}", static_cast<uint32_t>(t)));
  }
  return v;
}

}  // namespace

bool GgufValue::is_integer() const {
  return type != GgufType::kString && type != GgufType::kArray && !is_float() && scalar_size(type) != 0;
}

size_t GgufValue::array_size() const { return strings.size() + ints.size() + floats.size(); }

GgufValue GgufValue::u32(uint32_t v) {
  GgufValue g;
  g.type = GgufType::kUint32;
  g.i = v;
  return g;
}
GgufValue GgufValue::i32(int32_t v) {
  GgufValue g;
  g.type = GgufType::kInt32;
  g.i = v;
  return g;
}
GgufValue GgufValue::f32(float v) {
  GgufValue g;
  g.type = GgufType::kFloat32;
  g.f = v;
  return g;
}
GgufValue GgufValue::boolean(bool v) {
  GgufValue g;
  g.type = GgufType::kBool;
  g.i = v ? 1 : 0;
  return g;
}
GgufValue GgufValue::str(std::string v) {
  GgufValue g;
  g.type = GgufType::kString;
  g.s = std::move(v);
  return g;
}
GgufValue GgufValue::string_array(std::vector<std::string> v) {
  GgufValue g;
  g.type = GgufType::kArray;
  g.elem_type = GgufType::kString;
  g.strings = std::move(v);
  return g;
}
GgufValue GgufValue::f32_array(std::vector<float> v) {
  GgufValue g;
  g.type = GgufType::kArray;
  g.elem_type = GgufType::kFloat32;
  g.floats.assign(v.begin(), v.end());
  return g;
}
GgufValue GgufValue::i32_array(std::vector<int32_t> v) {
  GgufValue g;
  g.type = GgufType::kArray;
  g.elem_type = GgufType::kInt32;
  g.ints.assign(v.begin(), v.end());
  return g;
}

const GgufValue* GgufContents::find(const std::string& key) const {
  auto it = metadata.find(key);
  return it == metadata.end() ? nullptr : &it->second;
}

Result<int64_t> GgufContents::get_int(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return not_found(fmt::format("GGUF metadata key {} is missing", key));
  if (!v->is_integer()) return invalid_argument(fmt::format("GGUF metadata key {} is not an integer", key));
  return v->i;
}

Result<double> GgufContents::get_float(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return not_found(fmt::format("GGUF metadata key {} is missing", key));
  if (v->is_float()) return v->f;
  if (v->is_integer()) return static_cast<double>(v->i);
  return invalid_argument(fmt::format("GGUF metadata key {} is not a number", key));
}

Result<std::string> GgufContents::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return not_found(fmt::format("GGUF metadata key {} is missing", key));
  if (v->type != GgufType::kString) return invalid_argument(fmt::format("GGUF metadata key {} is not a string", key));
  return v->s;
}

namespace {
// ggml's tensor type ids (ggml.h, enum ggml_type), with Tessera's DType where it reads the type. Ids whose
// support ggml removed keep their old names so that an old file's error still says what it holds.
struct GgmlTypeName {
  uint32_t id;
  const char* name;
  std::optional<DType> dtype;
};
constexpr GgmlTypeName kGgmlTypes[] = {
    {0, "F32", DType::kF32},          {1, "F16", DType::kF16},          {2, "Q4_0", DType::kQ4_0},
    {3, "Q4_1", DType::kQ4_1},        {4, "Q4_2", std::nullopt},        {5, "Q4_3", std::nullopt},
    {6, "Q5_0", DType::kQ5_0},        {7, "Q5_1", DType::kQ5_1},        {8, "Q8_0", DType::kQ8_0},
    {9, "Q8_1", std::nullopt},        {10, "Q2_K", DType::kQ2_K},       {11, "Q3_K", DType::kQ3_K},
    {12, "Q4_K", DType::kQ4_K},       {13, "Q5_K", DType::kQ5_K},       {14, "Q6_K", DType::kQ6_K},
    {15, "Q8_K", std::nullopt},       {16, "IQ2_XXS", std::nullopt},    {17, "IQ2_XS", std::nullopt},
    {18, "IQ3_XXS", std::nullopt},    {19, "IQ1_S", std::nullopt},      {20, "IQ4_NL", std::nullopt},
    {21, "IQ3_S", std::nullopt},      {22, "IQ2_S", std::nullopt},      {23, "IQ4_XS", std::nullopt},
    {24, "I8", std::nullopt},         {25, "I16", std::nullopt},        {26, "I32", std::nullopt},
    {27, "I64", std::nullopt},        {28, "F64", std::nullopt},        {29, "IQ1_M", std::nullopt},
    {30, "BF16", DType::kBF16},       {31, "Q4_0_4_4", std::nullopt},   {32, "Q4_0_4_8", std::nullopt},
    {33, "Q4_0_8_8", std::nullopt},   {34, "TQ1_0", std::nullopt},      {35, "TQ2_0", std::nullopt},
    {36, "IQ4_NL_4_4", std::nullopt}, {37, "IQ4_NL_4_8", std::nullopt}, {38, "IQ4_NL_8_8", std::nullopt},
    {39, "MXFP4", DType::kMXFP4},     {40, "NVFP4", std::nullopt},      {41, "Q1_0", std::nullopt},
    {42, "Q2_0", std::nullopt},
};

std::string supported_ggml_types() {
  std::string out;
  for (const GgmlTypeName& t : kGgmlTypes) {
    if (t.dtype) out += fmt::format("{}{}={}", out.empty() ? "" : ", ", t.name, t.id);
  }
  return out;
}
}  // namespace

const char* ggml_type_name(uint32_t ggml_type) {
  for (const GgmlTypeName& t : kGgmlTypes) {
    if (t.id == ggml_type) return t.name;
  }
  return nullptr;
}

Result<DType> dtype_from_ggml_type(uint32_t t) {
  const char* name = ggml_type_name(t);
  if (!name) {
    return invalid_argument(
        fmt::format("GGUF tensor type {} is unknown (not a ggml type; supported: {})", t, supported_ggml_types()));
  }
  for (const GgmlTypeName& g : kGgmlTypes) {
    if (g.id == t && g.dtype) return *g.dtype;
  }
  return unimplemented(
      fmt::format("GGUF tensor type {} ({}) is not supported (supported: {})", t, name, supported_ggml_types()));
}

uint32_t ggml_type_of(DType d) {
  if (d == DType::kI32) return 26;
  for (const GgmlTypeName& g : kGgmlTypes) {
    if (g.dtype == d) return g.id;
  }
  TS_CHECK(false && "ggml_type_of: every DType has a ggml id");
  return 0;
}

Result<GgufContents> parse_gguf(std::span<const uint8_t> bytes, const std::string& name) {
  Reader r(bytes, name);
  GgufContents c;
  TS_ASSIGN_OR_RETURN(uint32_t magic, r.read<uint32_t>());
  if (magic != kMagic) return invalid_argument(fmt::format("{} is not a GGUF file: wrong magic", name));
  TS_ASSIGN_OR_RETURN(c.version, r.read<uint32_t>());
  if (c.version != 3 && c.version != 2) {
    return invalid_argument(
        fmt::format("{}: GGUF version {} is not supported (versions 2 and 3 are)", name, c.version));
  }
  TS_ASSIGN_OR_RETURN(uint64_t n_tensors, r.read<uint64_t>());
  TS_ASSIGN_OR_RETURN(uint64_t n_kv, r.read<uint64_t>());
  // A key/value takes at least 8 + 4 + 1 bytes, a tensor info at least 8 + 4 + 8 + 4 + 8.
  if (n_kv > r.remaining() / 13) return r.error(fmt::format("metadata count {} exceeds what the file can hold", n_kv));
  if (n_tensors > r.remaining() / 32)
    return r.error(fmt::format("tensor count {} exceeds what the file can hold", n_tensors));
  for (uint64_t k = 0; k < n_kv; ++k) {
    TS_ASSIGN_OR_RETURN(std::string key, r.read_string());
    TS_ASSIGN_OR_RETURN(uint32_t type, r.read<uint32_t>());
    TS_ASSIGN_OR_RETURN(GgufValue v, read_value(r, static_cast<GgufType>(type)));
    if (c.metadata.count(key)) return r.error(fmt::format("duplicate metadata key {}", key));
    c.keys.push_back(key);
    c.metadata.emplace(std::move(key), std::move(v));
  }
  if (const GgufValue* a = c.find("general.alignment")) {
    if (!a->is_integer() || a->i <= 0 || a->i > (1 << 20) || (a->i & (a->i - 1)) != 0)
      return invalid_argument(fmt::format("{}: general.alignment must be a power of two up to 1 MiB", name));
    c.alignment = static_cast<uint64_t>(a->i);
  }
  std::map<std::string, int> seen;
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensor t;
    TS_ASSIGN_OR_RETURN(t.name, r.read_string());
    TS_ASSIGN_OR_RETURN(uint32_t n_dims, r.read<uint32_t>());
    if (n_dims < 1 || n_dims > kMaxDims)
      return r.error(fmt::format("tensor {} has {} dimensions (1 to {} allowed)", t.name, n_dims, kMaxDims));
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      TS_ASSIGN_OR_RETURN(uint64_t ne, r.read<uint64_t>());
      if (ne == 0 || ne > (uint64_t{1} << 40) || numel > (uint64_t{1} << 42) / ne)
        return r.error(fmt::format("tensor {} has an implausible dimension {}", t.name, ne));
      numel *= ne;
      t.ne.push_back(static_cast<int64_t>(ne));
    }
    TS_ASSIGN_OR_RETURN(uint32_t type, r.read<uint32_t>());
    auto dt = dtype_from_ggml_type(type);
    if (!dt.ok()) return dt.status().with_context(fmt::format("{}: tensor {}", name, t.name));
    t.dtype = *dt;
    TS_ASSIGN_OR_RETURN(t.offset, r.read<uint64_t>());
    const DTypeInfo& info = dtype_info(t.dtype);
    if (t.ne[0] % info.block_elems != 0)
      return r.error(fmt::format("tensor {}: row length {} is not a multiple of the {} block size {}", t.name, t.ne[0],
                                 info.name, info.block_elems));
    t.bytes = dtype_bytes(t.dtype, static_cast<size_t>(numel));
    if (t.offset % c.alignment != 0)
      return r.error(fmt::format("tensor {}: offset {} is not aligned to {}", t.name, t.offset, c.alignment));
    if (seen[t.name]++) return r.error(fmt::format("duplicate tensor {}", t.name));
    c.tensors.push_back(std::move(t));
  }
  uint64_t data_start = (r.pos() + c.alignment - 1) / c.alignment * c.alignment;
  if (data_start > bytes.size() && !c.tensors.empty())
    return invalid_argument(fmt::format("{}: truncated: the data section would start at byte {} but the file has {}",
                                        name, data_start, bytes.size()));
  for (GgufTensor& t : c.tensors) {
    uint64_t avail = bytes.size() - data_start;
    if (t.offset > avail || t.bytes > avail - t.offset) {
      return invalid_argument(
          fmt::format("{}: truncated data: tensor {} needs bytes [{}, {}) of the data section, which holds {} bytes",
                      name, t.name, t.offset, t.offset + t.bytes, avail));
    }
    t.data = bytes.data() + data_start + t.offset;
  }
  return c;
}

namespace {

class Writer {
 public:
  explicit Writer(std::ofstream& out) : out_(out) {}
  template <typename T>
  void put(T v) {
    out_.write(reinterpret_cast<const char*>(&v), sizeof(T));
    pos_ += sizeof(T);
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    out_.write(s.data(), static_cast<std::streamsize>(s.size()));
    pos_ += s.size();
  }
  void put_bytes(const void* p, size_t n) {
    out_.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
    pos_ += n;
  }
  void pad_to(uint64_t alignment) {
    static const char zeros[64] = {};
    while (pos_ % alignment) put_bytes(zeros, std::min<uint64_t>(alignment - pos_ % alignment, sizeof(zeros)));
  }
  void put_scalar(GgufType t, int64_t i, double f) {
    switch (t) {
      case GgufType::kUint8:
      case GgufType::kBool:
        return put<uint8_t>(static_cast<uint8_t>(i));
      case GgufType::kInt8:
        return put<int8_t>(static_cast<int8_t>(i));
      case GgufType::kUint16:
        return put<uint16_t>(static_cast<uint16_t>(i));
      case GgufType::kInt16:
        return put<int16_t>(static_cast<int16_t>(i));
      case GgufType::kUint32:
        return put<uint32_t>(static_cast<uint32_t>(i));
      case GgufType::kInt32:
        return put<int32_t>(static_cast<int32_t>(i));
      case GgufType::kUint64:
        return put<uint64_t>(static_cast<uint64_t>(i));
      case GgufType::kInt64:
        return put<int64_t>(i);
      case GgufType::kFloat32:
        return put<float>(static_cast<float>(f));
      case GgufType::kFloat64:
        return put<double>(f);
      default:
        return;
    }
  }
  void put_value(const GgufValue& v) {
    put<uint32_t>(static_cast<uint32_t>(v.type));
    if (v.type == GgufType::kString) return put_string(v.s);
    if (v.type != GgufType::kArray) return put_scalar(v.type, v.i, v.f);
    put<uint32_t>(static_cast<uint32_t>(v.elem_type));
    put<uint64_t>(v.array_size());
    for (const std::string& s : v.strings) put_string(s);
    for (int64_t x : v.ints) put_scalar(v.elem_type, x, 0);
    for (double x : v.floats) put_scalar(v.elem_type, 0, x);
  }

 private:
  std::ofstream& out_;
  uint64_t pos_ = 0;
};

}  // namespace

Status write_gguf(const std::string& path, const std::vector<std::pair<std::string, GgufValue>>& metadata,
                  const std::vector<GgufTensor>& tensors) {
  constexpr uint64_t kAlign = 32;
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return unavailable(fmt::format("cannot write {}", tmp));
    Writer w(out);
    w.put<uint32_t>(kMagic);
    w.put<uint32_t>(3);
    w.put<uint64_t>(tensors.size());
    w.put<uint64_t>(metadata.size());
    for (const auto& [key, value] : metadata) {
      w.put_string(key);
      w.put_value(value);
    }
    uint64_t offset = 0;
    for (const GgufTensor& t : tensors) {
      w.put_string(t.name);
      w.put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
      for (int64_t ne : t.ne) w.put<uint64_t>(static_cast<uint64_t>(ne));
      w.put<uint32_t>(ggml_type_of(t.dtype));
      w.put<uint64_t>(offset);
      offset += (t.bytes + kAlign - 1) / kAlign * kAlign;
    }
    w.pad_to(kAlign);
    for (const GgufTensor& t : tensors) {
      w.put_bytes(t.data, t.bytes);
      w.pad_to(kAlign);
    }
    out.flush();
    if (!out) return unavailable(fmt::format("failed writing {} (disk full?)", tmp));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return unavailable(fmt::format("cannot rename {} to {}: {}", tmp, path, ec.message()));
  return ok_status();
}

}  // namespace tessera::model
