// Sequence: one request's token stream and KV state as the scheduler and engine see it.
//
// tokens = prompt + generated. kv.length tokens have their K/V in the cache; the rest (the prompt's
// uncomputed part, or the one token sampled last) is what the next step must compute. After a
// preemption kv.length drops to 0 and everything is recomputed (the prefix cache usually makes that cheap).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/block_manager.h"
#include "engine/kv_cache.h"
#include "model/tokenizer/tokenizer.h"

namespace tessera::engine {

enum class SequenceId : uint64_t {};

struct Sequence {
  SequenceId id{};
  uint64_t arrival = 0;  // submission order: first come, first served
  std::vector<model::TokenId> tokens;
  int prompt_len = 0;
  SequenceKv kv;
  std::vector<BlockHash> block_hashes;  // chain hashes of the leading full blocks already registered
  bool prefix_checked = false;          // the prefix cache was consulted since the last (re)admission
  int external_tokens = 0;              // of that admission: positions supplied from outside (ExternalKv)
  bool external_async = false;          //   and whether they take time
  bool compute_prompt = false;          // every prompt position is computed, none taken from the prefix cache
                                        // (prompt_logprobs needs their logits)
  bool uncached = false;                // its blocks never enter the prefix cache (embeddings)
  int max_prefix = INT32_MAX;           // the longest prefix it may take from the prefix cache
  int state_branch = 0;                 // hybrid models: where it parted at admission from a cached prefix that
                                        // other prompts part from too (KvCache::match_prefix's branch_at), when no
                                        // state was kept there: a state checkpoint is taken there (0: none)
  int state_hint = 0;                   // hybrid models: where the request expects later prompts to part from this
                                        // one (GenerationRequest::state_hint; 0: none)
  bool keep_reply_state = true;         // hybrid models: a running checkpoint is kept past the prompt's end
                                        // (GenerationRequest::keep_reply_state)
  bool whole = false;                   // the prompt is computed in one step or not at all (an encoder's input)
  int preemptions = 0;

  int remaining() const { return static_cast<int>(tokens.size()) - kv.length; }
  int generated() const { return static_cast<int>(tokens.size()) - prompt_len; }
};

}  // namespace tessera::engine
