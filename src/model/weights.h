// ModelWeights: a format-independent, host-side view of a model's tensors.
//
// Every format reader (llama2.c now; GGUF and safetensors later) produces tensors under GGUF's names so the
// engine binds weights the same way whatever the file:
//   token_embd.weight [vocab, dim]          output_norm.weight [dim]        output.weight [vocab, dim] (untied only)
//   blk.N.attn_norm.weight [dim]            blk.N.ffn_norm.weight [dim]
//   blk.N.attn_q.weight [q_dim, dim]        blk.N.attn_k.weight / attn_v.weight [kv_dim, dim]
//   blk.N.attn_output.weight [dim, q_dim]   blk.N.ffn_gate.weight / ffn_up.weight [hidden, dim]
//   blk.N.ffn_down.weight [dim, hidden]
//   blk.N.attn_q.bias [q_dim], attn_k.bias / attn_v.bias [kv_dim]   (optional: Qwen2)
//   blk.N.attn_q_norm.weight / attn_k_norm.weight [head_dim]         (Qwen3, Gemma 3)
//   blk.N.post_attention_norm.weight / post_ffw_norm.weight [dim]    (Gemma 2 and 3)
//   rope_freqs.weight [head_dim / 2]                                 (Llama 3.1+: rotary frequency divisors)
//   rope_factors_long.weight / rope_factors_short.weight [head_dim/2] (Phi-3 longrope)
// Phi-3 files fuse blk.N.attn_qkv.weight and a double-height ffn_up.weight; readers split them into the
// names above (views of the same bytes) and writers fuse them again.
// Shapes are row-major [rows, cols]; a matrix maps a vector of `cols` to one of `rows` (y = W x).
//
// Ownership: tensors point into `storage` (usually a MappedFile), which the view keeps alive.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"

namespace tessera::model {

struct WeightTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t bytes = 0;

  int64_t numel() const;
};

class ModelWeights {
 public:
  ModelWeights() = default;
  explicit ModelWeights(std::shared_ptr<const void> storage) : storage_(std::move(storage)) {}

  void add(WeightTensor t) { tensors_.push_back(std::move(t)); }
  // Replaces the tensor of the same name (adds it when absent).
  void replace(WeightTensor t);
  const std::vector<WeightTensor>& tensors() const { return tensors_; }
  // nullptr when absent.
  const WeightTensor* find(std::string_view name) const;
  // NotFound naming the tensor, or InvalidArgument when its shape differs from `shape`.
  Result<const WeightTensor*> require(std::string_view name, const std::vector<int64_t>& shape) const;

 private:
  std::shared_ptr<const void> storage_;
  std::vector<WeightTensor> tensors_;
};

std::string layer_tensor_name(int layer, std::string_view suffix);  // "blk.3.attn_q.weight"

// Consecutive row ranges of a 2-D tensor as views of its bytes (any storage type: rows are whole blocks).
// InvalidArgument when the row counts do not add up to the tensor's.
Result<std::vector<WeightTensor>> split_rows(const WeightTensor& t, const std::vector<std::string>& names,
                                             const std::vector<int64_t>& rows);

}  // namespace tessera::model
