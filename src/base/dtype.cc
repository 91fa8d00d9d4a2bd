#include "base/dtype.h"

#include <array>

#include "base/check.h"

namespace tessera {
namespace {
// Indexed by the enumerator. Sizes are ggml's block structs (base/quant.h asserts them).
constexpr DTypeInfo kInfos[] = {
    {"f32", 1, 4},      {"f16", 1, 2},      {"bf16", 1, 2},     {"q8_0", 32, 34},   {"q4_0", 32, 18},
    {"i32", 1, 4},      {"q4_1", 32, 20},   {"q5_0", 32, 22},   {"q5_1", 32, 24},   {"q2_k", 256, 84},
    {"q3_k", 256, 110}, {"q4_k", 256, 144}, {"q5_k", 256, 176}, {"q6_k", 256, 210}, {"mxfp4", 32, 17},
};
constexpr auto kAll = [] {
  std::array<DType, std::size(kInfos)> a{};
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<DType>(i);
  return a;
}();

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }
}  // namespace

const DTypeInfo& dtype_info(DType t) {
  auto i = static_cast<size_t>(t);
  TS_CHECK(i < std::size(kInfos));
  return kInfos[i];
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (size_t i = 0; i < std::size(kInfos); ++i) {
    std::string_view n = kInfos[i].name;
    if (n.size() != name.size()) continue;
    bool same = true;
    for (size_t c = 0; c < n.size() && same; ++c) same = n[c] == lower(name[c]);
    if (same) return static_cast<DType>(i);
  }
  return std::nullopt;
}

std::span<const DType> all_dtypes() { return kAll; }

}  // namespace tessera
