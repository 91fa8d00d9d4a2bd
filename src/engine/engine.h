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
// KV from outside the device cache comes and goes through KV connectors (engine/kv_connector.h), added before
// start(): at admission each is asked, after the prefix cache, how much of the prompt it can supply; what it
// supplies is loaded layer by layer during the step that needs it (or, for KV computed on another node, before
// the request decodes its first token); connectors may save each layer of a step, keep blocks the cache evicts,
// and hear every request's end. A load that fails or comes short is computed here instead.
//
// Public API changes (issue 30): the block APIs (lookup_prefix, reserve_blocks, release_blocks) and the PD fields
// of GenerationRequest (on_kv_layer, export_from, imported, ImportedKv) are gone. The prefill/decode hand-off is
// the pd-link connector (kv/pd_link), addressed through GenerationRequest::kv_transfer; a PD request enters the
// engine once per phase (one submit on the prefill node, one on the decode node). Block ids are BlockId.
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
#include "engine/kv_connector.h"
#include "engine/kv_events.h"
#include "engine/model_runner.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "grammar/compiler.h"
#include "model/tokenizer/tokenizer.h"

namespace tessera::engine {

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
  // Parameters for the engine's KV connectors (engine/kv_connector.h), addressed to one of them by name: the PD
  // service asks the pd-link connector to load this prompt's KV from a prefill node, or to save it to a decode
  // node. Choices 1..n-1 of a request do not carry them.
  std::shared_ptr<const KvTransferParams> kv_transfer;
  // >= 0: a connector reads every layer's rows of this prompt from this position on, and they must be real (a
  // prefill node whose decode node keeps every position): a windowed cache (engine/kv_cache.h) then takes from its
  // prefix cache only a prefix whose sliding layers still hold rows from there on.
  int real_rows_from = -1;
  // A hybrid model with state checkpoints (engine/kv_cache.h): a prompt position up to which later prompts are
  // expected to share this one (serve passes the end of a chat's system prompt and the next message's opening): the
  // recurrent state at the last block boundary at or before it is kept, so that the first prompt sharing it reuses
  // that much. 0: none (the prompt's end, and where it parts from another cached prompt, are kept regardless).
  int state_hint = 0;
  // A hybrid model with state checkpoints: the state at the last block boundary the reply crosses is kept (KvCache's
  // running checkpoint), for a next turn that sends this prompt and the reply back. serve clears it for a chat
  // completion whose template does not render the reply back as generated (serve::renders_reply_back) or whose
  // replies carry reasoning apart: there the next turn parts from this one where the reply starts.
  bool keep_reply_state = true;
  // The next turn sends the reply back as text (a chat completion, a completion with a text prompt): the reply's
  // state is kept only if that text tokenizes back to the tokens generated up to it. False: as tokens (a token
  // prompt), kept as it is.
  bool reply_as_text = false;
  // An embedding request (serve/embeddings_api.h): the prompt is computed and its final hidden states pooled
  // this way; it generates nothing and ends with RequestOutput::embedding. Its prompt is never taken from the
  // prefix cache or a KV connector and its blocks never enter either (a pooled prompt needs every row, and an
  // encoder's blocks hold no K/V); they are freed when it ends. A causal model's prompt may be chunked (pooled
  // chunk by chunk); an encoder's (non-causal) is computed in one step, so it must fit the scheduler's token budget.
  std::optional<ops::PoolKind> pool;
};

inline constexpr int kMaxChoices = 16;

struct RequestTiming {
  double queued = 0;   // submitted -> first scheduled (into a step, or a connector's load)
  double prefill = 0;  // first scheduled -> first token
  double decode = 0;   // first token -> last token
};

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
  int cached_tokens = 0;  // prompt tokens found in the prefix cache (device, or a connector's cache tier)
  // With prompt_logprobs, on a choice's first output: one entry per prompt position from 1 on.
  std::vector<TokenLogprobs> prompt_logprobs;
  // On the last output: where the request's time went (vLLM's per-request metrics), in seconds.
  RequestTiming timing;
  std::vector<float> embedding;  // an embedding request's pooled vector (not normalised), on its final output
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
  // A windowed cache (engine/kv_cache.h): the sliding layers' own pool, and its blocks held by sequences (0: none).
  int window_blocks_total = 0;
  int window_blocks_used = 0;
  PrefixCacheStats prefix;
  bool prefix_cache_enabled = true;  // false by flag, or for a hybrid model (no recurrent state at block boundaries)
  int state_slots_total = 0;         // hybrid models: recurrent-state slots, and those held by sequences
  int state_slots_used = 0;
  int state_checkpoints_total = 0;  // hybrid models: state checkpoints for prefix reuse, and those holding a state
  int state_checkpoints_used = 0;
  uint64_t steps = 0;
  uint64_t preemptions = 0;
  uint64_t prompt_tokens = 0;  // computed prompt tokens (prefix hits excluded; KV a connector brought from a node
                               // that computed it counts)
  uint64_t generated_tokens = 0;
  int kv_loading = 0;                // requests waiting for a connector's asynchronous load
  uint64_t kv_loaded_tokens = 0;     // positions connectors filled
  uint64_t kv_load_shortfalls = 0;   // loads that brought fewer positions than promised: the rest computed here
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

  // KV connectors (engine/kv_connector.h), consulted in the order added. The engine attaches each (its KvBlockIo,
  // a wake function) and keeps a reference; added to a running engine, a connector joins between two steps.
  // AlreadyExists for a second connector of the same name.
  Status add_connector(std::shared_ptr<KvConnector> connector);
  // Every connector's counters (thread-safe).
  std::vector<KvConnectorStats> connector_stats() const;
  // The cache's shape, as connectors see it.
  const KvGeometry& kv_geometry() const;

  const model::ModelConfig& config() const { return runner_.config(); }
  // Whether the cache's sliding layers keep only their windows (KvCache::windowed()).
  bool windowed_kv() const { return runner_.kv_cache().windowed(); }
  int block_tokens() const { return runner_.kv_cache().block_tokens(); }
  // Whether a hybrid model's prefix is reused through state checkpoints (GenerationRequest::state_hint matters).
  bool state_checkpoints() const { return runner_.kv_cache().state_checkpoints() > 0; }
  // What the prefix cache holds, as events (kv_events.h): served on /internal/kv/events for KV-aware routing.
  const KvEventLog& kv_events() const { return kv_events_; }
  const model::Tokenizer& tokenizer() const { return tokenizer_; }
  // Compiles structured-output specs for this model's vocabulary, cached (thread-safe; call it off the engine thread).
  grammar::Compiler& grammars() { return *grammars_; }

 private:
  struct Active;
  void loop();
  void run_step();
  void admit_new();
  void finish(Active& a, FinishReason reason, Status error = ok_status());
  // Whether a's reply comes back as the tokens it was generated as, up to `position` (GenerationRequest::reply_as_text:
  // its text tokenizes back to them): a running state checkpoint there can serve the next turn.
  bool reply_comes_back(const Active& a, int position) const;
  void publish_stats();                                              // copies the engine thread's counters into stats_
  void on_token(Active& a, std::vector<float>& logits, size_t row);  // samples row `row` of logits in place
  // The step's rows: every sequence's draw made on the device's host threads (Draw, draw()), then taken in row
  // order here (accept_token); a request's first row with n > 1 goes through on_token (it makes the choices).
  struct Draw;
  void sample_rows(const Schedule& sch, std::span<const Segment> segments, std::vector<float>& logits);
  void draw(Draw& d, std::span<float> row);
  // Appends a token chosen by `on_token` or brought by a connector and reports it.
  // `given`: the token's logprobs computed elsewhere (a prefill node drew it), used when there are no logits here.
  void accept_token(Active& a, TokenId tok, std::vector<float>* logprob_logits, const TokenLogprobs* given = nullptr);
  // KV connectors (engine_kv.cc): the scheduler's ExternalKv, the loads' ends, the worker-side calls of a step.
  class External;
  class Io;
  struct WakeState;
  ExternalKv::Match match_external(Active& a);
  void allocated_external(Active& a, int local);
  void poll_connectors();
  // Every async range of `a` has ended: it joins the running set with what arrived (and takes its first tokens
  // when a connector brought them and everything arrived).
  void complete_load(Active& a);
  // Copies a's pending ranges into the cache now, every layer (outside a step). False: the load failed and `a`
  // falls back to computing those positions.
  bool load_now(Active& a);
  // Connectors hear that `a` ended or was preempted; true when one keeps its blocks.
  bool tell_connectors(Active& a, KvEnd end);
  // A hybrid model's state checkpoints due in chunk `c` (KvCache): each one a checkpoint is free to take goes into
  // `seg`, its hash into `filled` (checkpoint_written() after the step, whichever way it ends).
  void take_checkpoints(const ScheduledChunk& c, Segment& seg, std::vector<BlockHash>& filled);
  // n > 1, once the prompt is computed (or imported): choices 1..n-1 of `a`, not yet admitted.
  std::vector<std::unique_ptr<Active>> make_choices(const Active& a);
  // Admits a choice made by make_choices with its first token; its KV is forked from `a`'s (engine/kv_fork.h).
  void admit_choice(Active& a, std::unique_ptr<Active> choice, TokenId first, std::vector<float>* logprob_logits,
                    const TokenLogprobs* given = nullptr);
  // Records the prompt logprobs of rows [first, first + rows / vocab) of a prompt chunk starting at `start`.
  void record_prompt_logprobs(Active& a, int start, int first, std::span<const float> rows);
  // Reports a's pending output (its choice index, and the prompt logprobs on its first output).
  void emit(Active& a);
  // The stop tokens min_tokens masks for a request.
  std::vector<TokenId> stop_tokens(const GenerationRequest& r) const;
  // submit()'s checks (engine_request.cc; a request without a grammar has its grammar_replay cleared), and an
  // embedding request's own; finish_embeddings ends those once their whole prompt is pooled.
  Status check_request(GenerationRequest& request) const;
  Status check_embedding(const GenerationRequest& r) const;
  void finish_embeddings(const Schedule& sch);

  ModelRunner& runner_;
  const model::Tokenizer& tokenizer_;
  EngineOptions options_;
  KvEventLog kv_events_;  // the runner's BlockManager publishes to it while this engine lives
  Scheduler scheduler_;
  std::thread thread_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;                          // GUARDED_BY(mu_)
  bool kicked_ = false;                            // GUARDED_BY(mu_): a connector has news (its wake function)
  std::vector<std::unique_ptr<Active>> incoming_;  // GUARDED_BY(mu_)
  std::vector<RequestId> cancels_;                 // GUARDED_BY(mu_)
  std::vector<std::function<void()>> tasks_;       // GUARDED_BY(mu_)
  EngineStats stats_;                              // GUARDED_BY(mu_), a copy refreshed every step
  RequestId next_id_ = 1;                          // GUARDED_BY(mu_)
  uint64_t next_arrival_ = 0;                      // GUARDED_BY(mu_)

  Status add_connector_now(std::shared_ptr<KvConnector> connector);  // before start(), or on the engine thread
  // Written before start() or on the engine thread (which reads it unlocked); others read it under the lock.
  mutable std::mutex connectors_mu_;
  std::vector<std::shared_ptr<KvConnector>> connectors_;
  std::unique_ptr<Io> io_;
  std::unique_ptr<External> external_;
  std::shared_ptr<WakeState> wake_;

  // Engine thread only.
  std::unordered_map<RequestId, std::unique_ptr<Active>> active_;
  std::unordered_map<RequestId, std::vector<BlockId>> held_;  // blocks a connector keeps after their request ended
  EngineStats counters_;
  std::vector<float> step_logits_;  // the step's logits, kept so that a step does not allocate them
  std::vector<Draw> draws_;         // the step's draws, kept for their buffers' capacity
  std::unique_ptr<grammar::Compiler> grammars_;
};

}  // namespace tessera::engine
