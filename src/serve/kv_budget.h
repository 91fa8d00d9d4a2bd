// How much KV a node keeps, from its flags and its device: `--kv-memory` MiB, or `--kv-memory-fraction` of the
// device's memory less the weights (vLLM's --gpu-memory-utilization in spirit); a hybrid model's recurrent state
// for --max-num-seqs sequences taken from it first (only full-attention layers keep K and V), then its state
// checkpoints for prefix reuse; the served context
// (`--max-model-len`, else the model's, shortened with a warning to what the budget holds, as vLLM does); and the
// blocks: no more than every running sequence at full context could use, at least one full context. A model with
// sliding-window layers whose window is shorter than the context gives those layers a pool of their own sized for
// their windows (flags.window_kv), when the full layers then hold more positions than every layer would without it.
//
// Thread-safety: pure.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"
#include "model/model_config.h"

namespace tessera::serve {

struct KvBudgetFlags {
  double kv_memory_mib = 1024;
  double kv_memory_fraction = 0;  // > 0: replaces kv_memory_mib
  int max_model_len = 0;          // 0: the model's context, or what the budget holds
  int max_num_seqs = 64;
  int block_size = 16;
  DType kv_dtype = DType::kF16;
  // Sliding-window layers may keep only their windows, in a pool sized for max_num_seqs sequences and steps of
  // max_batch_tokens (engine::KvCache::window_pool_blocks): chosen when that holds more positions of the full layers.
  bool window_kv = false;
  int max_batch_tokens = 0;
  // Hybrid models: state checkpoints for prefix reuse (engine::KvCacheOptions::state_checkpoints), taken from the
  // budget after the running sequences' state. -1: as many as a quarter of what is left holds; 0: none (prefix reuse
  // off). `prefix_reuse` false (--no-prefix-cache, --role-switchable): none either way.
  int state_checkpoints = -1;
  bool prefix_reuse = true;
};

struct KvBudget {
  int num_blocks = 0;
  int max_seq_len = 0;                // the served context
  int state_slots = 0;                // recurrent-state slots (hybrid models); 0: none
  int state_checkpoints = 0;          // their checkpoints for prefix reuse; 0: none (prefix reuse off)
  double checkpoint_mib = 0;          // the checkpoints' share
  int window_blocks = 0;              // > 0: the sliding layers keep only their windows, in this many blocks
  double window_mib = 0;              // their share
  double kv_mib = 0;                  // the budget, before the state is taken from it
  double state_mib = 0;               // the recurrent state's share
  std::vector<std::string> info;      // what was decided, for the node's info log
  std::vector<std::string> warnings;  // what the user should know (a shortened context)
};

// `device_bytes` is the device's memory (0: unknown, then `host_bytes`); `weight_bytes` what the weights take.
// InvalidArgument saying what does not fit and which flag to change.
Result<KvBudget> plan_kv_budget(const model::ModelConfig& cfg, const KvBudgetFlags& flags, uint64_t device_bytes,
                                uint64_t host_bytes, uint64_t weight_bytes);

}  // namespace tessera::serve
