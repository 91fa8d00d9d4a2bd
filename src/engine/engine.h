// Engine: serves many concurrent generation requests on one ModelRunner with continuous batching.
//
// submit() validates a request and queues it; a single engine thread then loops: take new requests and
// cancellations, ask the Scheduler for a step, run it on the ModelRunner, sample each sequence that
// produced logits, turn tokens into text (holding back bytes that may start a stop string or an unfinished
// UTF-8 character), and report each increment through the request's callback. A request ends at a stop
// token (the model's end-of-generation list; EOS and BOS without one), a stop string, a stop token id, max_tokens, the
// model's context, cancellation or an error; its blocks then go back to the pool (full blocks stay in the prefix cache
// until evicted).
//
// Thread-safety: submit(), cancel(), stats() and stop() may be called from any thread. Callbacks run on the
// engine thread and must not block.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"
#include "engine/finish_reason.h"
#include "engine/model_runner.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "grammar/compiler.h"
#include "model/tokenizer/tokenizer.h"

namespace tessera::engine {

using RequestId = uint64_t;

// KV computed on another node (a prefill node) for positions [first, first + count) of the prompt, in the
// canonical request layout [layer][k|v][position][kv_head][head_dim] of `dtype`, and the first generated token.
struct ImportedKv {
  int first = 0;
  int count = 0;
  DType dtype = DType::kF32;
  std::vector<uint8_t> data;  // the bytes, owned here; or, when `view` is set, ignored:
  // A view of memory kept alive by `view_owner` (a decode node's link staging range, given back when the
  // ImportedKv goes, which the engine lets happen as soon as the import is done): the KV goes from the wire
  // memory into the device cache in one copy, never through `data`.
  std::span<const uint8_t> view;
  std::shared_ptr<const void> view_owner;
  std::span<const uint8_t> bytes() const { return view.data() != nullptr ? view : std::span<const uint8_t>(data); }
  TokenId first_token = 0;
  // n > 1: the first tokens of choices 1..n-1, drawn by the prefill node from the same logits (choice 0's is
  // first_token); each choice continues from the one KV import (GenerationRequest::n).
  std::vector<TokenId> choice_tokens;
  std::vector<int32_t> cached_blocks;  // blocks holding positions [0, first), already retained (lookup_prefix)
  // Fresh blocks for the positions from `first` on, allocated before the transfer (reserve_blocks); the
  // engine allocates whatever is still missing at import time.
  std::vector<int32_t> reserved_blocks;
};

struct PrefixLookup {
  int cached_tokens = 0;
  std::vector<int32_t> blocks;  // retained for the caller: hand them to ImportedKv or release_blocks()
};

struct GenerationRequest {
  std::vector<TokenId> prompt;  // BOS included when the model wants one
  SamplingParams sampling;
  int max_tokens = 16;
  std::vector<std::string> stop;        // stop strings (not included in the output)
  std::vector<TokenId> stop_token_ids;  // extra stop tokens (not included)
  bool ignore_eos = false;
  // false: special tokens generated (other than the stop tokens) are spelled in the text (vLLM's
  // skip_special_tokens); true: they contribute no text.
  bool skip_special_tokens = true;
  int logprobs = -1;  // -1: none; 0..20: the chosen token's log-probability and this many alternatives
  // OpenAI's n: this many choices of the same prompt (1..kMaxChoices). The prompt is computed once; when its
  // last row's logits exist each choice draws its first token from them (choice i with seed + i when the
  // request has a seed, as vLLM seeds its child requests) and continues on its own sequence, sharing the
  // prompt's full KV blocks and a copy of the partial one (engine/kv_fork.h). Every output names its choice
  // (RequestOutput::index) and every choice ends with its own final output.
  int n = 1;
  // vLLM's prompt_logprobs: -1 none; 0..20: the log-probability of every prompt token after the first, given
  // the tokens before it, and this many alternatives (RequestOutput::prompt_logprobs). Such a prompt is
  // computed whole, never taken from the prefix cache.
  int prompt_logprobs = -1;
  // Structured output (docs/structured-outputs.md): every sampled token is masked to what the grammar allows, the
  // end token only once it is complete, and the request ends ("stop") as soon as nothing can follow. A request
  // that runs out of max_tokens first ends with "length". Compile with Engine::grammars().
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
  // The last `grammar_replay` prompt tokens were generated earlier (a resumed stream): the grammar reads them
  // before the first new token.
  int grammar_replay = 0;
  // Prefill node: called for every layer of every prompt chunk computed, right after the layer's K and V are
  // in the cache (positions [first, first + count)); an error fails the request.
  // Positions before export_from are not exported (the decode node has them cached); positions this engine
  // found in its own prefix cache are exported with the first computed chunk.
  std::function<Status(ModelRunner&, const SequenceKv&, int layer, int first, int count)> on_kv_layer;
  int export_from = 0;
  // Decode node: the prompt's KV was computed elsewhere; import it and continue from `first_token`.
  std::shared_ptr<const ImportedKv> imported;
};

inline constexpr int kMaxChoices = 16;

struct RequestOutput {
  int index = 0;                              // the choice (0..n-1) this output belongs to
  std::string text;                           // new text since the previous output
  std::vector<TokenId> tokens;                // tokens sampled since the previous output
  std::vector<TokenLogprobs> logprobs;        // one per token when requested
  std::vector<std::string> token_texts;       // decode_piece() of each token (for logprobs)
  FinishReason finish = FinishReason::kNone;  // set on the last output only
  Status error;                               // when finish == kError
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;  // prompt tokens found in the prefix cache
  // With prompt_logprobs, on a choice's first output: one entry per prompt position from 1 on.
  std::vector<TokenLogprobs> prompt_logprobs;
};

using OutputCallback = std::function<void(const RequestOutput&)>;

struct EngineOptions {
  SchedulerOptions scheduler;
  // Tokens that end a request (unless it sets ignore_eos): the model's list (model::GenerationDefaults).
  // Empty: the tokenizer's EOS and BOS.
  std::vector<TokenId> end_of_generation;
  // Arrivals at an idle engine are gathered before its first step while they keep coming (each one within
  // admission_gap of the previous), for at most admission_window, and no longer once they fill the sequence
  // slots: a burst is then prefilled in one step and its streams decode in step afterwards, whereas a prompt
  // prefilled later, while the others already decode, stretches every one of their inter-token times
  // (docs/bench/serving-tpot.md). Only an idle engine waits, so no running stream is delayed; a lone request
  // waits admission_gap. admission_window 0: no wait.
  std::chrono::microseconds admission_window{0};
  std::chrono::microseconds admission_gap{0};
  // Structured output: where the grammar allows only one continuation, its tokens are appended without a model
  // step (grammar::Matcher::forced_tokens; the last token of the stretch is still sampled) and computed with the
  // next step's chunk. Off for requests that want logprobs (forced tokens have none).
  bool jump_forward = true;
};

struct EngineStats {
  int waiting = 0;
  int running = 0;
  int kv_blocks_total = 0;
  int kv_blocks_used = 0;
  int kv_blocks_cached = 0;
  PrefixCacheStats prefix;
  uint64_t steps = 0;
  uint64_t preemptions = 0;
  uint64_t prompt_tokens = 0;  // computed prompt tokens (prefix hits excluded)
  uint64_t generated_tokens = 0;
  uint64_t imports_requeued = 0;     // imported KV given up for lack of blocks; the prompt was recomputed here
  uint64_t grammar_tokens = 0;       // tokens sampled under a structured-output grammar
  double grammar_seconds = 0;        // engine-thread time computing their masks and advancing the grammars
  uint64_t jump_forward_tokens = 0;  // tokens a grammar forced, appended without a model step
};

class Engine {
 public:
  Engine(ModelRunner& runner, const model::Tokenizer& tokenizer, EngineOptions options);
  ~Engine();  // stops
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  void start();
  // Cancels everything in flight (each gets a kCancelled output) and joins the thread.
  void stop();

  // InvalidArgument for bad parameters or a prompt that leaves no room in the context; ResourceExhausted
  // when the queue is full. On success the callback will be called at least once, last with finish set.
  Result<RequestId> submit(GenerationRequest request, OutputCallback callback);
  // What submit() would answer about the queue now: ResourceExhausted when it is full, Unavailable when stopped
  // (a caller that must answer before it submits checks this first; submit() still decides).
  Status admission() const;
  // Ends a request early, every choice of it (each gets kCancelled). Unknown or finished ids are ignored.
  void cancel(RequestId id);

  EngineStats stats() const;

  // Runs `task` on the engine thread (between steps) and waits for it. Unavailable when stopped.
  Status run_on_engine_thread(const std::function<void()>& task);
  // Looks `tokens` up in the prefix cache (whole blocks, at most tokens.size() - 1 tokens) and retains the hits.
  Result<PrefixLookup> lookup_prefix(const std::vector<TokenId>& tokens);
  void release_blocks(const std::vector<int32_t>& blocks);
  // Allocates `count` free KV blocks for the caller (a decode node reserving room for KV that another node
  // is about to send); all or nothing: ResourceExhausted when the cache cannot hold them now.
  Result<std::vector<int32_t>> reserve_blocks(int count);
  const model::ModelConfig& config() const { return runner_.config(); }
  int block_tokens() const { return runner_.kv_cache().block_tokens(); }
  const model::Tokenizer& tokenizer() const { return tokenizer_; }
  // Compiles structured-output specs for this model's vocabulary, cached (thread-safe; call it off the engine thread).
  grammar::Compiler& grammars() { return *grammars_; }

 private:
  struct Active;
  void loop();
  void run_step();
  void admit_new();
  void finish(Active& a, FinishReason reason, Status error = ok_status());
  void publish_stats();                                              // copies the engine thread's counters into stats_
  void on_token(Active& a, std::vector<float>& logits, size_t row);  // samples row `row` of logits in place
  // Appends a token chosen by `on_token` or received from a prefill node and reports it.
  void accept_token(Active& a, TokenId tok, std::vector<float>* logprob_logits);
  // Installs imported KV; false when blocks are short (retried next loop).
  bool import(Active& a);
  // n > 1, once the prompt is computed (or imported): choices 1..n-1 of `a`, not yet admitted.
  std::vector<std::unique_ptr<Active>> make_choices(const Active& a);
  // Admits a choice made by make_choices with its first token; its KV is forked from `a`'s (engine/kv_fork.h).
  void admit_choice(Active& a, std::unique_ptr<Active> choice, TokenId first, std::vector<float>* logprob_logits);
  // Records the prompt logprobs of rows [first, first + rows / vocab) of a prompt chunk starting at `start`.
  void record_prompt_logprobs(Active& a, int start, int first, std::span<const float> rows);
  // Reports a's pending output (its choice index, and the prompt logprobs on its first output).
  void emit(Active& a);
  // The stop tokens min_tokens masks for a request.
  std::vector<TokenId> stop_tokens(const GenerationRequest& r) const;

  ModelRunner& runner_;
  const model::Tokenizer& tokenizer_;
  EngineOptions options_;
  Scheduler scheduler_;
  std::thread thread_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;                          // GUARDED_BY(mu_)
  std::vector<std::unique_ptr<Active>> incoming_;  // GUARDED_BY(mu_)
  std::vector<RequestId> cancels_;                 // GUARDED_BY(mu_)
  std::vector<std::function<void()>> tasks_;       // GUARDED_BY(mu_)
  EngineStats stats_;                              // GUARDED_BY(mu_), a copy refreshed every step
  RequestId next_id_ = 1;                          // GUARDED_BY(mu_)
  uint64_t next_arrival_ = 0;                      // GUARDED_BY(mu_)

  // Engine thread only.
  std::unordered_map<RequestId, std::unique_ptr<Active>> active_;
  std::vector<RequestId> importing_;  // imported requests waiting for KV blocks
  EngineStats counters_;
  std::vector<float> step_logits_;  // the step's logits, kept so that a step does not allocate them
  std::unique_ptr<grammar::Compiler> grammars_;
};

}  // namespace tessera::engine
