#include "base/dtype.h"

#include "base/check.h"

namespace tessera {
namespace {
constexpr DTypeInfo kInfos[] = {
    {"f32", 1, 4}, {"f16", 1, 2}, {"bf16", 1, 2}, {"q8_0", 32, 34}, {"q4_0", 32, 18}, {"i32", 1, 4},
};
}  // namespace

const DTypeInfo& dtype_info(DType t) {
  auto i = static_cast<size_t>(t);
  TS_CHECK(i < std::size(kInfos));
  return kInfos[i];
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (size_t i = 0; i < std::size(kInfos); ++i) {
    if (kInfos[i].name == name) return static_cast<DType>(i);
  }
  return std::nullopt;
}

}  // namespace tessera
