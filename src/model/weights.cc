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

void ModelWeights::replace(WeightTensor t) {
  for (WeightTensor& u : tensors_) {
    if (u.name == t.name) {
      u = std::move(t);
      return;
    }
  }
  tensors_.push_back(std::move(t));
}

Result<std::vector<WeightTensor>> split_rows(const WeightTensor& t, const std::vector<std::string>& names,
                                             const std::vector<int64_t>& rows) {
  int64_t total = 0;
  for (int64_t r : rows) total += r;
  if (t.shape.size() != 2 || t.shape[0] != total || t.shape[0] == 0 || t.bytes % static_cast<size_t>(t.shape[0]) != 0)
    return invalid_argument(fmt::format("tensor {} has shape [{}], expected {} rows to split into {}", t.name,
                                        fmt::join(t.shape, ", "), total, fmt::join(names, ", ")));
  const size_t row_bytes = t.bytes / static_cast<size_t>(t.shape[0]);
  std::vector<WeightTensor> out;
  int64_t at = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    out.push_back({names[i],
                   t.dtype,
                   {rows[i], t.shape[1]},
                   t.data + static_cast<size_t>(at) * row_bytes,
                   static_cast<size_t>(rows[i]) * row_bytes});
    at += rows[i];
  }
  return out;
}

std::string layer_tensor_name(int layer, std::string_view suffix) { return fmt::format("blk.{}.{}", layer, suffix); }

}  // namespace tessera::model
