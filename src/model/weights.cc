#include "model/weights.h"

#include <fmt/format.h>

namespace tessera::model {

int64_t WeightTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const WeightTensor* ModelWeights::find(std::string_view name) const {
  for (const WeightTensor& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

Result<const WeightTensor*> ModelWeights::require(std::string_view name, const std::vector<int64_t>& shape) const {
  const WeightTensor* t = find(name);
  if (t == nullptr) return not_found(fmt::format("model has no tensor {}", name));
  if (t->shape != shape) {
    return invalid_argument(fmt::format("tensor {} has shape [{}], expected [{}]", name, fmt::join(t->shape, ", "),
                                        fmt::join(shape, ", ")));
  }
  return t;
}

std::string layer_tensor_name(int layer, std::string_view suffix) { return fmt::format("blk.{}.{}", layer, suffix); }

}  // namespace tessera::model
