#include "ops/tensor.h"

#include <fmt/format.h>

namespace tessera::ops {

std::string Tensor::shape_string() const {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) s += fmt::format("{}{}", i ? ", " : "", dims[static_cast<size_t>(i)]);
  return s + "] " + std::string(dtype_name(dtype));
}

}  // namespace tessera::ops
