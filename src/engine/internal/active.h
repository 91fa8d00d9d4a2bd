// Engine::Active: one request (one choice of it) as the engine thread tracks it. Internal to engine.cc and
// engine_kv.cc. Engine thread only.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/chunk_pool.h"
#include "engine/engine.h"
#include "engine/logits_processors.h"
#include "engine/sequence.h"
#include "grammar/matcher.h"

namespace tessera::engine {

struct Engine::Active {
  RequestId id = 0;
  RequestId group = 0;  // the request's id, its first choice's: cancel() ends every choice of the group
  int index = 0;        // the choice (GenerationRequest::n)
  bool forked = false;  // the other choices exist (n > 1), or this is one of them
  GenerationRequest req;
  OutputCallback callback;
  Sequence seq;
  Sampler sampler;
  std::unordered_map<TokenId, int> counts;  // generated tokens, for the penalties
  std::string text;                         // everything decoded so far
  size_t emitted = 0;                       // bytes of `text` already reported
  RequestOutput pending;
  bool finished = false;
  int cached_tokens = -1;  // set when first scheduled (admitted())
  std::chrono::steady_clock::time_point submitted = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point scheduled{};    // first admitted
  std::chrono::steady_clock::time_point first_token{};  // its first token appended
  std::unique_ptr<grammar::Matcher> matcher;            // structured output: where the generated text is in the grammar
  std::vector<uint64_t> mask_words;                     // its mask, reused from step to step
  bool jumping = false;                                 // appending forced tokens (EngineOptions::jump_forward)

  LogitsProcessors procs;                 // min_tokens, logit_bias, penalties (engine/logits_processors.h)
  std::vector<TokenLogprobs> prompt_lps;  // prompt_logprobs: positions 1.. of the prompt
  bool prompt_lps_sent = false;
  ChunkPool pooled;  // embedding requests: the chunks' pooled vectors so far

  // KV connectors (engine_kv.cc): what each consulted connector supplies for the current admission.
  struct KvRange {
    size_t connector = 0;
    int first = 0;  // positions [first, first + count)
    int count = 0;
    bool async = false;
    bool cached = true;
    bool first_tokens = false;
    bool state = false;                   // KvMatch::state: the recurrent state after its last position comes with it
    bool done = false;                    // async: poll() reported its end
    int arrived = 0;                      // async: positions that arrived intact
    std::vector<TokenId> tokens;          // first_tokens: one per choice
    std::vector<TokenLogprobs> logprobs;  // ... and their logprobs, when the request asked and they were sent
  };
  std::vector<KvRange> ranges;    // one per connector consulted at the current admission (count may be 0)
  std::vector<BlockHash> hashes;  // chain hashes of seq.tokens' whole blocks (KvRequestView::block_hashes)
  int local_tokens = 0;           // what the device prefix cache supplied at the current admission
  bool consulted = false;         // connectors have seen it: they hear its end
  bool loading = false;           // in the scheduler's loading list, waiting for async ranges
  bool pending_load = false;      // ranges to copy into the cache when it is next computed (or at once)

  // The first admission: what the caches supplied, and when.
  void admitted(int cached) {
    if (cached_tokens >= 0) return;
    cached_tokens = cached;
    scheduled = std::chrono::steady_clock::now();
  }

  Active(GenerationRequest r, OutputCallback cb) : req(std::move(r)), callback(std::move(cb)), sampler(req.sampling) {}
};

}  // namespace tessera::engine
