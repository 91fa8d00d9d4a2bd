#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <future>

#include <fmt/core.h>

#include "api/kv_layout.h"
#include "base/log.h"
#include "engine/grammar_mask.h"
#include "engine/kv_fork.h"
#include "engine/logits_processors.h"

namespace tessera::engine {

std::string_view finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone:
      return "";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
  }
  return "";
}

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
  int cached_tokens = -1;                     // set when first scheduled
  int exported = -1;                          // prefill nodes: positions [export_from, exported) have been exported
  std::unique_ptr<grammar::Matcher> matcher;  // structured output: where the generated text is in the grammar
  std::vector<uint64_t> mask_words;           // its mask, reused from step to step
  bool jumping = false;                       // appending forced tokens (EngineOptions::jump_forward)

  LogitsProcessors procs;                 // min_tokens, logit_bias, penalties (engine/logits_processors.h)
  std::vector<TokenLogprobs> prompt_lps;  // prompt_logprobs: positions 1.. of the prompt
  bool prompt_lps_sent = false;

  Active(GenerationRequest r, OutputCallback cb) : req(std::move(r)), callback(std::move(cb)), sampler(req.sampling) {}
};

namespace {

const std::vector<std::string> kNoStops;

// A request's grammar matcher, past the output a resumed stream already sent (the last grammar_replay prompt
// tokens).
Result<std::unique_ptr<grammar::Matcher>> make_matcher(const GenerationRequest& r) {
  auto m = std::make_unique<grammar::Matcher>(r.grammar);
  const std::vector<TokenId>& p = r.prompt;
  for (size_t i = p.size() - static_cast<size_t>(r.grammar_replay); i < p.size(); ++i) {
    if (!m->accept_token(p[i]))
      return invalid_argument(fmt::format("the resumed output does not follow the request's grammar (token {})", p[i]));
  }
  return m;
}

// Bytes at the end of `text` that must not be reported yet: an unfinished UTF-8 character, or the start of
// a stop string.
size_t held_back(const std::string& text, const std::vector<std::string>& stops) {
  size_t hold = 0;
  size_t i = text.size(), cont = 0;
  while (i > 0 && cont < 3 && (static_cast<unsigned char>(text[i - 1]) & 0xC0) == 0x80) {
    --i;
    ++cont;
  }
  if (i > 0) {
    auto lead = static_cast<unsigned char>(text[i - 1]);
    size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (need > cont + 1) hold = cont + 1;
  }
  for (const std::string& stop : stops) {
    for (size_t k = std::min(stop.size() - 1, text.size()); k > hold; --k) {
      if (text.compare(text.size() - k, k, stop, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  return hold;
}

}  // namespace

Engine::Engine(ModelRunner& runner, const model::Tokenizer& tokenizer, EngineOptions options)
    : runner_(runner), tokenizer_(tokenizer), options_(options), scheduler_(runner.kv_cache(), options.scheduler) {
  stats_.kv_blocks_total = runner.kv_cache().num_blocks();
  std::vector<TokenId> eog = options_.end_of_generation;
  if (eog.empty() && tokenizer.eos_id() >= 0) eog.push_back(tokenizer.eos_id());
  grammars_ = std::make_unique<grammar::Compiler>(tokenizer_, std::move(eog));
}

Engine::~Engine() { stop(); }

void Engine::start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { loop(); });
}

void Engine::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Result<RequestId> Engine::submit(GenerationRequest request, OutputCallback callback) {
  TS_RETURN_IF_ERROR(validate(request.sampling));
  const model::ModelConfig& c = runner_.config();
  if (request.prompt.empty()) return invalid_argument("the prompt is empty");
  if (request.max_tokens < 1)
    return invalid_argument(fmt::format("max_tokens must be at least 1, got {}", request.max_tokens));
  if (static_cast<int64_t>(request.prompt.size()) >= c.max_seq_len) {
    return invalid_argument(
        fmt::format("the prompt is {} tokens; this model's context is {} tokens, which leaves no room to generate",
                    request.prompt.size(), c.max_seq_len));
  }
  for (TokenId t : request.prompt) {
    if (t < 0 || t >= c.vocab_size)
      return invalid_argument(fmt::format("token id {} is outside the vocabulary [0, {})", t, c.vocab_size));
  }
  for (const std::string& s : request.stop) {
    if (s.empty()) return invalid_argument("stop strings must not be empty");
  }
  if (request.logprobs > 20) return invalid_argument(fmt::format("at most 20 top logprobs, got {}", request.logprobs));
  if (request.prompt_logprobs < -1 || request.prompt_logprobs > 20)
    return invalid_argument(fmt::format("prompt_logprobs must be between 0 and 20, got {}", request.prompt_logprobs));
  if (request.n < 1 || request.n > kMaxChoices)
    return invalid_argument(fmt::format("n must be between 1 and {}, got {}", kMaxChoices, request.n));
  if (request.sampling.min_tokens > request.max_tokens)
    return invalid_argument(fmt::format("min_tokens ({}) must not exceed max_tokens ({})", request.sampling.min_tokens,
                                        request.max_tokens));
  for (const auto& [id, bias] : request.sampling.logit_bias) {
    if (id >= c.vocab_size)
      return invalid_argument(
          fmt::format("logit_bias names token id {}, outside the vocabulary [0, {})", id, c.vocab_size));
  }
  if (request.imported) {
    const std::vector<TokenId>& more = request.imported->choice_tokens;
    if (static_cast<int>(more.size()) != request.n - 1)
      return invalid_argument(
          fmt::format("imported KV brings {} first tokens for {} choices", more.size() + 1, request.n));
    for (TokenId t : more) {
      if (t < 0 || t >= c.vocab_size)
        return invalid_argument(fmt::format("token id {} is outside the vocabulary [0, {})", t, c.vocab_size));
    }
    if (request.prompt_logprobs >= 0)
      return invalid_argument("prompt_logprobs needs the prompt computed on this node, not imported");
  }
  if (request.imported) {
    const ImportedKv& kv = *request.imported;
    const size_t want = api::KvLayout{c.n_layers, c.kv_dim(), kv.dtype, kv.count}.bytes();
    if (kv.first < 0 || kv.count < 1 || kv.first + kv.count != static_cast<int>(request.prompt.size()) ||
        kv.bytes().size() != want) {
      return invalid_argument(
          fmt::format("imported KV covers [{}, {}) with {} bytes; the prompt has {} tokens and needs {} bytes",
                      kv.first, kv.first + kv.count, kv.bytes().size(), request.prompt.size(), want));
    }
  }
  if (!request.grammar) request.grammar_replay = 0;
  if (request.grammar_replay < 0 || request.grammar_replay >= static_cast<int>(request.prompt.size())) {
    return invalid_argument(fmt::format("grammar_replay {} is outside the prompt's {} tokens", request.grammar_replay,
                                        request.prompt.size()));
  }
  const int choices = request.n;
  std::vector<TokenId> stops = stop_tokens(request);
  auto a = std::make_unique<Active>(std::move(request), std::move(callback));
  if (a->req.grammar) {
    auto m = make_matcher(a->req);
    if (!m.ok()) return m.status();
    a->matcher = std::move(*m);
  }
  a->seq.tokens = a->req.prompt;
  a->seq.prompt_len = static_cast<int>(a->seq.tokens.size());
  a->procs = LogitsProcessors(a->req.sampling, a->req.prompt, std::move(stops));
  if (a->req.prompt_logprobs >= 0) {
    a->seq.compute_prompt = true;
    a->prompt_lps.resize(static_cast<size_t>(a->seq.prompt_len - 1));
  }
  if (a->req.imported) {
    // The prefix blocks the caller looked up (and retained) are this sequence's from now on.
    a->seq.kv.blocks = a->req.imported->cached_blocks;
    a->seq.kv.blocks.insert(a->seq.kv.blocks.end(), a->req.imported->reserved_blocks.begin(),
                            a->req.imported->reserved_blocks.end());
    a->seq.kv.length = a->req.imported->first;
    a->seq.prefix_checked = true;
  }
  RequestId id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return unavailable("the engine is shutting down");
    const int queued = stats_.waiting + static_cast<int>(incoming_.size());
    if (queued >= options_.scheduler.max_waiting) {
      return resource_exhausted(fmt::format("the server is busy: {} requests are already waiting", queued));
    }
    id = next_id_;
    next_id_ += static_cast<RequestId>(choices);  // the other choices' ids (make_choices)
    a->id = id;
    a->group = id;
    a->seq.id = static_cast<SequenceId>(id);
    a->seq.arrival = next_arrival_++;
    incoming_.push_back(std::move(a));
  }
  cv_.notify_one();
  return id;
}

Status Engine::admission() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return unavailable("the engine is shutting down");
  const int queued = stats_.waiting + static_cast<int>(incoming_.size());
  if (queued >= options_.scheduler.max_waiting) {
    return resource_exhausted(fmt::format("the server is busy: {} requests are already waiting", queued));
  }
  return ok_status();
}

void Engine::cancel(RequestId id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancels_.push_back(id);
  }
  cv_.notify_one();
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Engine::loop() {
  for (;;) {
    std::vector<std::unique_ptr<Active>> incoming;
    std::vector<RequestId> cancels;
    std::vector<std::function<void()>> tasks;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        return stopping_ || !incoming_.empty() || !cancels_.empty() || !tasks_.empty() || !active_.empty();
      });
      if (stopping_) break;
      if (active_.empty() && !incoming_.empty() && options_.admission_window.count() > 0) {
        // Idle, and requests arrive: let the rest of a burst catch up before the first step (EngineOptions).
        const size_t slots = static_cast<size_t>(std::max(1, options_.scheduler.max_running));
        const auto deadline = std::chrono::steady_clock::now() + options_.admission_window;
        size_t seen = incoming_.size();
        while (incoming_.size() < slots && cancels_.empty() && tasks_.empty()) {
          const auto until = std::min(deadline, std::chrono::steady_clock::now() + options_.admission_gap);
          const bool woke = cv_.wait_until(lock, until, [&] {
            return stopping_ || incoming_.size() != seen || !cancels_.empty() || !tasks_.empty();
          });
          if (!woke || stopping_ || std::chrono::steady_clock::now() >= deadline) break;  // quiet for a gap, or late
          seen = incoming_.size();
        }
        if (stopping_) break;
      }
      incoming.swap(incoming_);
      // Until the next publish these are in neither incoming_ nor the published waiting count: count them now,
      // or submit() would admit past the limit and Scheduler::add refuse after the caller's 200 went out.
      for (const auto& a : incoming) stats_.waiting += a->req.imported ? 0 : 1;
      cancels.swap(cancels_);
      tasks.swap(tasks_);
    }
    for (auto& t : tasks) t();
    for (auto& a : incoming) {
      RequestId id = a->id;
      const bool imported = a->req.imported != nullptr;
      Status st = imported ? ok_status() : scheduler_.add(&a->seq);
      active_[id] = std::move(a);
      if (!st.ok()) finish(*active_[id], FinishReason::kError, st);
      if (imported) importing_.push_back(id);
    }
    // Imported KV goes in as soon as blocks allow, oldest first; one that must wait for blocks does not hold
    // up those behind it (they may hold reserved blocks and need nothing more).
    std::erase_if(importing_, [&](RequestId id) {
      auto it = active_.find(id);
      return it == active_.end() || it->second->finished || import(*it->second);
    });
    if (!cancels.empty()) {
      std::vector<Active*> ending;
      for (auto& [id, a] : active_) {
        if (!a->finished && std::find(cancels.begin(), cancels.end(), a->group) != cancels.end())
          ending.push_back(a.get());
      }
      for (Active* a : ending) finish(*a, FinishReason::kCancelled);
    }
    std::erase_if(active_, [](const auto& kv) { return kv.second->finished; });
    if (!active_.empty()) run_step();
    std::erase_if(active_, [](const auto& kv) { return kv.second->finished; });

    publish_stats();
  }
  for (auto& [id, a] : active_) {
    if (!a->finished) finish(*a, FinishReason::kCancelled);
  }
  active_.clear();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& a : incoming_) {
    for (int i = 0; i < a->req.n; ++i) {
      RequestOutput o;
      o.index = i;
      o.finish = FinishReason::kCancelled;
      a->callback(o);
    }
  }
  incoming_.clear();
}

void Engine::run_step() {
  Schedule sch = scheduler_.schedule();
  counters_.preemptions += sch.preempted.size();
  for (Sequence* s : sch.rejected) {
    Active& a = *active_.at(static_cast<RequestId>(s->id));
    if (a.seq.generated() > 0) {
      finish(a, FinishReason::kLength);
    } else {
      finish(a, FinishReason::kError,
             resource_exhausted(
                 fmt::format("a prompt of {} tokens needs more KV blocks than the cache holds ({} of {} tokens)",
                             s->tokens.size(), runner_.kv_cache().num_blocks(), runner_.kv_cache().block_tokens())));
    }
  }
  if (sch.empty()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return;
  }
  std::vector<Segment> segments;
  segments.reserve(sch.chunks.size());
  for (const ScheduledChunk& c : sch.chunks) {
    Sequence& s = *c.seq;
    Active& a = *active_.at(static_cast<RequestId>(s.id));
    if (a.cached_tokens < 0) a.cached_tokens = s.kv.length;  // what the prefix cache supplied at admission
    const bool last = s.kv.length + c.num_tokens == static_cast<int>(s.tokens.size());
    if (s.kv.length < s.prompt_len)
      counters_.prompt_tokens += static_cast<uint64_t>(std::min(c.num_tokens, s.prompt_len - s.kv.length));
    segments.push_back(
        {&s.kv, std::span(s.tokens).subspan(static_cast<size_t>(s.kv.length), static_cast<size_t>(c.num_tokens)),
         last});
    if (a.req.prompt_logprobs >= 0 && s.kv.length + 1 < s.prompt_len) {
      segments.back().all_logits = [this, ap = &a, start = s.kv.length](int first, std::span<const float> rows) {
        record_prompt_logprobs(*ap, start, first, rows);
      };
    }
  }
  // Prefill nodes export each computed layer as soon as it exists.
  ModelRunner::LayerHook hook;
  std::vector<std::pair<Active*, ScheduledChunk>> exporters;
  for (const ScheduledChunk& c : sch.chunks) {
    Active& a = *active_.at(static_cast<RequestId>(c.seq->id));
    if (a.req.on_kv_layer && c.seq->kv.length < c.seq->prompt_len) exporters.emplace_back(&a, c);
  }
  if (!exporters.empty()) {
    hook = [&](int layer) -> Status {
      for (auto& [a, c] : exporters) {
        // From where the last export stopped (or export_from): this covers prefix-cache hits too.
        const int first = std::max(a->req.export_from, a->exported < 0 ? a->req.export_from : a->exported);
        const int end = std::min(c.seq->kv.length + c.num_tokens, c.seq->prompt_len);
        if (end > first) TS_RETURN_IF_ERROR(a->req.on_kv_layer(runner_, c.seq->kv, layer, first, end - first));
      }
      return ok_status();
    };
  }
  std::vector<float>& logits = step_logits_;  // reused: its capacity stays from step to step
  Status st = runner_.step(segments, logits, hook);
  counters_.steps++;
  if (!st.ok()) {
    log::error("engine step failed: {}", st.to_string());
    for (const ScheduledChunk& c : sch.chunks)
      finish(*active_.at(static_cast<RequestId>(c.seq->id)), FinishReason::kError, st);
    return;
  }
  scheduler_.commit(sch);
  for (auto& [a, c] : exporters) a->exported = std::min(c.seq->kv.length, c.seq->prompt_len);
  size_t row = 0;
  for (size_t i = 0; i < sch.chunks.size(); ++i) {
    if (!segments[i].want_logits) continue;
    Active& a = *active_.at(static_cast<RequestId>(sch.chunks[i].seq->id));
    on_token(a, logits, row++);
  }
}

void Engine::on_token(Active& a, std::vector<float>& logits, size_t row) {
  const auto vocab = static_cast<size_t>(runner_.config().vocab_size);
  // Sampled in place: each row belongs to one sequence and is read once, so no copy of vocab floats per token.
  std::span<float> l(logits.data() + row * vocab, vocab);
  if (a.req.n > 1 && !a.forked) {
    // The prompt is computed: every other choice draws its first token from a copy of this row.
    a.forked = true;
    for (std::unique_ptr<Active>& c : make_choices(a)) {
      std::vector<float> x(l.begin(), l.end());
      c->procs.apply(x, c->counts, 0);
      std::vector<float> lp;
      if (c->req.logprobs >= 0) lp = x;
      if (c->matcher && !apply_grammar_mask(*c->matcher, c->mask_words, x)) {
        admit_choice(a, std::move(c), tokenizer_.eos_id(), nullptr);  // refused by its matcher: the choice fails
        continue;
      }
      const TokenId t = c->sampler.sample(x);
      const bool want_lp = c->req.logprobs >= 0;
      admit_choice(a, std::move(c), t, want_lp ? &lp : nullptr);
    }
  }
  a.procs.apply(l, a.counts, a.seq.generated());
  std::vector<float> for_logprobs;
  if (a.req.logprobs >= 0) for_logprobs.assign(l.begin(), l.end());
  if (a.matcher) {
    const auto t0 = std::chrono::steady_clock::now();
    const bool any = apply_grammar_mask(*a.matcher, a.mask_words, l);
    counters_.grammar_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    counters_.grammar_tokens++;
    if (!any) return finish(a, FinishReason::kError, internal_error("the request's grammar allows no token here"));
  }
  const TokenId tok = a.sampler.sample(l);
  accept_token(a, tok, a.req.logprobs >= 0 ? &for_logprobs : nullptr);
}

bool Engine::import(Active& a) {
  const ImportedKv& kv = *a.req.imported;
  Status st = runner_.kv_cache().reserve(a.seq.kv, static_cast<int32_t>(a.seq.tokens.size()));
  if (st.code() == StatusCode::kResourceExhausted) {
    if (scheduler_.running() > 0) return false;  // running sequences will free blocks: wait for them
    // Nothing running will free blocks (other requests' reservations hold them): rather than fail, the prompt
    // joins the waiting queue and is recomputed here once blocks free up, queueing and preempting by the
    // scheduler's rules like any local request. The transferred KV is given up.
    for (int32_t b : a.seq.kv.blocks) runner_.kv_cache().blocks().release(static_cast<BlockId>(b));
    a.seq.kv.blocks.clear();
    a.seq.kv.length = 0;
    a.seq.prefix_checked = false;
    a.req.imported.reset();
    counters_.imports_requeued++;
    if (Status added = scheduler_.add(&a.seq); !added.ok()) finish(a, FinishReason::kError, added);
    return true;
  }
  const model::ModelConfig& c = runner_.config();
  const api::KvLayout layout{c.n_layers, c.kv_dim(), kv.dtype, kv.count};
  for (int l = 0; st.ok() && l < c.n_layers; ++l) {
    st = runner_.import_kv(a.seq.kv, l, kv.first, kv.count, kv.dtype, kv.bytes().data() + layout.k_offset(l, 0),
                           kv.bytes().data() + layout.v_offset(l, 0));
  }
  if (!st.ok()) {
    finish(a, FinishReason::kError, st.with_context("importing the prefill node's KV"));
    return true;
  }
  a.seq.kv.length = static_cast<int32_t>(a.seq.tokens.size());
  a.cached_tokens = kv.first;
  scheduler_.add_running(&a.seq);
  scheduler_.commit(Schedule{{{&a.seq, 0}}, {}, {}});  // register the imported full blocks for prefix reuse
  counters_.prompt_tokens += static_cast<uint64_t>(kv.count);
  a.sampler.skip_draw();
  const TokenId first_token = kv.first_token;
  const std::vector<TokenId> choice_tokens = kv.choice_tokens;
  a.req.imported.reset();  // the KV is in the cache: its memory (a decode node's staging range) goes back now
  if (a.req.n > 1) {
    a.forked = true;
    std::vector<std::unique_ptr<Active>> choices = make_choices(a);
    for (size_t i = 0; i < choices.size(); ++i) {
      choices[i]->sampler.skip_draw();  // the prefill node drew it with this choice's seed
      admit_choice(a, std::move(choices[i]), choice_tokens[i], nullptr);
    }
  }
  accept_token(a, first_token, nullptr);
  return true;
}

std::vector<TokenId> Engine::stop_tokens(const GenerationRequest& r) const {
  std::vector<TokenId> out(r.stop_token_ids.begin(), r.stop_token_ids.end());
  if (!r.ignore_eos) {
    if (options_.end_of_generation.empty()) {
      out.push_back(tokenizer_.eos_id());
      out.push_back(tokenizer_.bos_id());
    } else {
      out.insert(out.end(), options_.end_of_generation.begin(), options_.end_of_generation.end());
    }
  }
  return out;
}

std::vector<std::unique_ptr<Engine::Active>> Engine::make_choices(const Active& a) {
  std::vector<std::unique_ptr<Active>> out;
  for (int i = 1; i < a.req.n; ++i) {
    GenerationRequest r = a.req;
    r.n = 1;
    r.imported.reset();
    r.on_kv_layer = nullptr;  // a prefill node exports the prompt once, from choice 0
    if (r.sampling.seed) r.sampling.seed = *r.sampling.seed + static_cast<uint64_t>(i);  // vLLM's child seeds
    auto c = std::make_unique<Active>(std::move(r), a.callback);
    c->id = a.id + static_cast<RequestId>(i);  // reserved by submit()
    c->group = a.group;
    c->index = i;
    c->forked = true;
    c->procs = a.procs;
    c->seq.id = static_cast<SequenceId>(c->id);
    c->seq.arrival = a.seq.arrival;
    c->seq.tokens = a.seq.tokens;
    c->seq.prompt_len = a.seq.prompt_len;
    c->seq.compute_prompt = a.seq.compute_prompt;
    c->cached_tokens = a.cached_tokens;
    c->prompt_lps = a.prompt_lps;
    if (c->req.grammar) c->matcher = std::move(make_matcher(c->req).value());  // the same replay passed submit()
    out.push_back(std::move(c));
  }
  return out;
}

void Engine::admit_choice(Active& a, std::unique_ptr<Active> choice, TokenId first,
                          std::vector<float>* logprob_logits) {
  Active& c = *choice;
  active_[c.id] = std::move(choice);
  accept_token(c, first, logprob_logits);
  if (c.finished) return;
  if (fork_kv(runner_, a.seq.kv, c.seq.kv).ok()) {
    c.seq.block_hashes = a.seq.block_hashes;  // the same full blocks, already registered
    c.seq.prefix_checked = true;
    scheduler_.add_running(&c.seq);
    return;
  }
  // No block free for the copy of the partial block: this choice waits and computes its prompt again (from
  // the prefix cache's full blocks) when there is room, like a preempted sequence.
  if (Status added = scheduler_.add(&c.seq); !added.ok()) finish(c, FinishReason::kError, added);
}

void Engine::record_prompt_logprobs(Active& a, int start, int first, std::span<const float> rows) {
  const auto vocab = static_cast<size_t>(runner_.config().vocab_size);
  for (size_t j = 0; j * vocab < rows.size(); ++j) {
    // The row at position p predicts the prompt token at p + 1.
    const int next = start + first + static_cast<int>(j) + 1;
    if (next >= a.seq.prompt_len) break;
    const std::span<const float> row = rows.subspan(j * vocab, vocab);
    const TokenId token = a.seq.tokens[static_cast<size_t>(next)];
    TokenLogprobs lp = compute_logprobs(row, token, a.req.prompt_logprobs);
    const float x = row[static_cast<size_t>(token)];
    lp.rank = 1 + static_cast<int>(std::count_if(row.begin(), row.end(), [x](float v) { return v > x; }));
    a.prompt_lps[static_cast<size_t>(next - 1)] = std::move(lp);
  }
}

void Engine::emit(Active& a) {
  a.pending.index = a.index;
  if (a.req.prompt_logprobs >= 0 && !a.prompt_lps_sent) {
    a.prompt_lps_sent = true;
    a.pending.prompt_logprobs = std::move(a.prompt_lps);
  }
  a.callback(a.pending);
  a.pending = RequestOutput{};
}

void Engine::accept_token(Active& a, TokenId tok, std::vector<float>* logprob_logits) {
  // A token from a prefill node is checked here too: a peer cannot break the grammar.
  if (a.matcher) {
    const auto t0 = std::chrono::steady_clock::now();
    const bool ok = a.matcher->accept_token(tok);
    counters_.grammar_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!ok)
      return finish(a, FinishReason::kError,
                    invalid_argument(fmt::format("token {} does not follow the request's grammar", tok)));
  }
  const TokenId prev = a.seq.tokens.back();
  a.seq.tokens.push_back(tok);
  a.counts[tok]++;
  counters_.generated_tokens++;
  const std::vector<TokenId>& eog = options_.end_of_generation;
  const bool ends_generation = eog.empty() ? (tok == tokenizer_.eos_id() || tok == tokenizer_.bos_id())
                                           : std::find(eog.begin(), eog.end(), tok) != eog.end();
  const bool is_stop_token =
      (!a.req.ignore_eos && ends_generation) ||
      std::find(a.req.stop_token_ids.begin(), a.req.stop_token_ids.end(), tok) != a.req.stop_token_ids.end();
  if (is_stop_token) return finish(a, FinishReason::kStop);

  std::string piece = !a.req.skip_special_tokens && tokenizer_.is_special(tok) ? tokenizer_.special_text(tok)
                                                                               : tokenizer_.decode_piece(prev, tok);
  a.pending.tokens.push_back(tok);
  a.pending.token_texts.push_back(piece);
  if (logprob_logits) a.pending.logprobs.push_back(compute_logprobs(*logprob_logits, tok, a.req.logprobs));
  a.text += piece;
  // Stop strings end a request only once it has more than min_tokens tokens (vLLM's rule).
  for (const std::string& stop : a.seq.generated() > a.req.sampling.min_tokens ? a.req.stop : kNoStops) {
    size_t at = a.text.find(stop, a.emitted);
    if (at != std::string::npos) {
      a.text.resize(at);
      return finish(a, FinishReason::kStop);
    }
  }
  // Complete, and nothing may follow: done without sampling the end token (before max_tokens: it is complete).
  if (a.matcher && (a.matcher->must_end() || a.matcher->ended())) return finish(a, FinishReason::kStop);
  if (a.seq.generated() >= a.req.max_tokens) return finish(a, FinishReason::kLength);
  if (static_cast<int64_t>(a.seq.tokens.size()) > runner_.config().max_seq_len) return finish(a, FinishReason::kLength);

  const size_t safe = a.text.size() - held_back(a.text, a.req.stop);
  if (safe > a.emitted || !a.pending.tokens.empty()) {
    a.pending.text = a.text.substr(a.emitted, safe > a.emitted ? safe - a.emitted : 0);
    a.emitted = std::max(a.emitted, safe);
    a.pending.prompt_tokens = a.seq.prompt_len;
    a.pending.completion_tokens = a.seq.generated();
    a.pending.cached_tokens = std::max(0, a.cached_tokens);
    emit(a);
  }
  if (a.matcher && options_.jump_forward && a.req.logprobs < 0 && !a.jumping) {
    a.jumping = true;
    for (TokenId t : a.matcher->forced_tokens()) {
      counters_.jump_forward_tokens++;
      accept_token(a, t, nullptr);
      if (a.finished) break;
    }
    a.jumping = false;
  }
}

Status Engine::run_on_engine_thread(const std::function<void()>& task) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> f = done->get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || !thread_.joinable()) return unavailable("the engine is not running");
    tasks_.push_back([task, done] {
      task();
      done->set_value();
    });
  }
  cv_.notify_one();
  while (f.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return unavailable("the engine stopped");
  }
  return ok_status();
}

Result<PrefixLookup> Engine::lookup_prefix(const std::vector<TokenId>& tokens) {
  PrefixLookup out;
  TS_RETURN_IF_ERROR(run_on_engine_thread([&] {
    const int max = std::max(0, static_cast<int>(tokens.size()) - 1);
    for (BlockId b : runner_.kv_cache().blocks().match_prefix(tokens, max))
      out.blocks.push_back(static_cast<int32_t>(b));
    out.cached_tokens = static_cast<int>(out.blocks.size()) * runner_.kv_cache().block_tokens();
  }));
  return out;
}

void Engine::release_blocks(const std::vector<int32_t>& blocks) {
  if (blocks.empty()) return;
  Status st = run_on_engine_thread([&] {
    for (int32_t b : blocks) runner_.kv_cache().blocks().release(static_cast<BlockId>(b));
    publish_stats();
  });
  (void)st;  // a stopped engine has nothing left to release into
}

Result<std::vector<int32_t>> Engine::reserve_blocks(int count) {
  if (count < 0) return invalid_argument(fmt::format("cannot reserve {} blocks", count));
  std::vector<int32_t> out;
  Status st;
  TS_RETURN_IF_ERROR(run_on_engine_thread([&] {
    BlockManager& blocks = runner_.kv_cache().blocks();
    for (int i = 0; i < count; ++i) {
      auto id = blocks.allocate();
      if (!id.ok()) {
        for (int32_t b : out) blocks.release(static_cast<BlockId>(b));
        out.clear();
        st = id.status().with_context(fmt::format("reserving {} KV blocks", count));
        return;
      }
      out.push_back(static_cast<int32_t>(*id));
    }
    publish_stats();  // a caller that reads stats() next sees the reservation
  }));
  if (!st.ok()) return st;
  return out;
}

void Engine::publish_stats() {
  EngineStats s = counters_;
  s.waiting = scheduler_.waiting();
  s.running = scheduler_.running();
  s.kv_blocks_total = runner_.kv_cache().num_blocks();
  s.kv_blocks_used = runner_.kv_cache().blocks().used();
  s.kv_blocks_cached = runner_.kv_cache().blocks().cached();
  s.prefix = runner_.kv_cache().blocks().stats();
  std::lock_guard<std::mutex> lock(mu_);
  stats_ = s;
}

void Engine::finish(Active& a, FinishReason reason, Status error) {
  if (a.finished) return;
  a.finished = true;
  scheduler_.remove(&a.seq);
  if (a.text.size() > a.emitted) a.pending.text = a.text.substr(a.emitted);
  a.emitted = a.text.size();
  a.pending.finish = reason;
  a.pending.error = std::move(error);
  a.pending.prompt_tokens = a.seq.prompt_len;
  a.pending.completion_tokens = a.seq.generated();
  a.pending.cached_tokens = std::max(0, a.cached_tokens);
  // Whoever sees the final output and then reads stats() must find this request's blocks already free.
  publish_stats();
  // n > 1 and the prompt never finished (an error, a cancellation): the other choices end the same way.
  const bool unforked = a.req.n > 1 && !a.forked;
  const RequestOutput last = unforked ? a.pending : RequestOutput{};
  emit(a);
  for (int i = 1; unforked && i < a.req.n; ++i) {
    RequestOutput o;
    o.index = i;
    o.finish = last.finish;
    o.error = last.error;
    o.prompt_tokens = last.prompt_tokens;
    o.cached_tokens = last.cached_tokens;
    a.callback(o);
  }
}

}  // namespace tessera::engine
