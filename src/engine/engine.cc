#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <optional>

#include <fmt/core.h>

#include "base/log.h"
#include "engine/chunk_pool.h"
#include "engine/grammar_mask.h"
#include "engine/internal/active.h"
#include "engine/internal/kv_parts.h"
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
  stats_.prefix_cache_enabled = runner.kv_cache().blocks().prefix_cache_enabled();
  stats_.state_slots_total = runner.kv_cache().state_slots();
  stats_.state_checkpoints_total = runner.kv_cache().state_checkpoints();
  // A hybrid model's prefix is of use only up to a block with a state: its log publishes those too (kv_events.h).
  kv_events_.set_states(runner.kv_cache().state_bytes_per_slot() > 0);
  runner.kv_cache().blocks().set_event_log(&kv_events_);
  io_ = std::make_unique<Io>(*this);
  external_ = std::make_unique<External>(*this);
  wake_ = std::make_shared<WakeState>();
  wake_->engine = this;
  std::vector<TokenId> eog = options_.end_of_generation;
  if (eog.empty() && tokenizer.eos_id() >= 0) eog.push_back(tokenizer.eos_id());
  grammars_ = std::make_unique<grammar::Compiler>(tokenizer_, std::move(eog));
}

Engine::~Engine() {
  stop();
  runner_.kv_cache().blocks().set_event_log(nullptr);
  for (const auto& c : connectors_) c->set_event_log(nullptr);
  if (wake_) {
    std::lock_guard<std::mutex> lock(wake_->mu);
    wake_->engine = nullptr;  // a connector's thread may still call its wake function
  }
}

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
  TS_RETURN_IF_ERROR(check_request(request));
  const model::ModelConfig& c = runner_.config();
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
  a->seq.state_hint = std::clamp(a->req.state_hint, 0, a->seq.prompt_len);
  a->seq.keep_reply_state = a->req.keep_reply_state;
  a->procs = LogitsProcessors(a->req.sampling, a->req.prompt, std::move(stops));
  if (a->req.pool) {  // computed whole (no prefix-cache hit), its blocks never cached; an encoder's in one step
    a->pooled = ChunkPool(*a->req.pool);
    a->seq.compute_prompt = true;
    a->seq.uncached = true;
    a->seq.whole = !c.causal;
  }
  if (a->req.real_rows_from >= 0 && runner_.kv_cache().windowed()) {
    // A hit of n positions holds the sliding layers' blocks from the one position n - window + 1 falls in.
    a->seq.max_prefix = a->req.real_rows_from + runner_.kv_cache().window() - 1;
  }
  if (a->req.prompt_logprobs >= 0) {
    a->seq.compute_prompt = true;
    a->prompt_lps.resize(static_cast<size_t>(a->seq.prompt_len - 1));
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
        return stopping_ || kicked_ || !incoming_.empty() || !cancels_.empty() || !tasks_.empty() || !active_.empty();
      });
      kicked_ = false;
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
      stats_.waiting += static_cast<int>(incoming.size());
      cancels.swap(cancels_);
      tasks.swap(tasks_);
    }
    for (auto& t : tasks) t();
    for (auto& a : incoming) {
      RequestId id = a->id;
      Status st = scheduler_.add(&a->seq);
      active_[id] = std::move(a);
      if (!st.ok()) finish(*active_[id], FinishReason::kError, st);
    }
    // Loads that ended (and blocks connectors held) since the last step.
    if (!connectors_.empty()) poll_connectors();
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
  // The engine stops: blocks a connector still held for a transfer go back (nothing will use them again).
  for (auto& [id, blocks] : held_) {
    for (BlockId b : blocks) runner_.kv_cache().blocks().release(b);
  }
  held_.clear();
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
  for (Sequence* s : sch.preempted) {
    Active& a = *active_.at(static_cast<RequestId>(s->id));
    if (a.consulted) tell_connectors(a, KvEnd::kPreempted);
    a.ranges.clear();
    a.pending_load = false;
  }
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
  // The blocks this schedule evicted go to the connectors before a checkpoint this step takes can replace the one
  // they would keep beside them (KvBlockIo::read_checkpoint).
  runner_.kv_cache().flush_evictions();
  std::vector<Segment> segments;
  segments.reserve(sch.chunks.size());
  std::vector<BlockHash> checkpoints;  // the state checkpoints this step fills
  for (const ScheduledChunk& c : sch.chunks) {
    Sequence& s = *c.seq;
    Active& a = *active_.at(static_cast<RequestId>(s.id));
    a.admitted(s.kv.length);  // what the prefix cache supplied at admission
    const bool last = s.kv.length + c.num_tokens == static_cast<int>(s.tokens.size());
    if (s.kv.length < s.prompt_len)
      counters_.prompt_tokens += static_cast<uint64_t>(std::min(c.num_tokens, s.prompt_len - s.kv.length));
    segments.push_back(
        {&s.kv, std::span(s.tokens).subspan(static_cast<size_t>(s.kv.length), static_cast<size_t>(c.num_tokens)),
         last});
    if (a.req.pool) {
      Segment& seg = segments.back();
      seg.want_logits = false;
      seg.pool = *a.req.pool;
      seg.pooled = [ap = &a, start = s.kv.length, count = c.num_tokens](std::span<const float> v) {
        ap->pooled.add(start, count, v);
      };
    }
    take_checkpoints(c, segments.back(), checkpoints);
    if (a.req.prompt_logprobs >= 0 && s.kv.length + 1 < s.prompt_len) {
      segments.back().all_logits = [this, ap = &a, start = s.kv.length](int first, std::span<const float> rows) {
        record_prompt_logprobs(*ap, start, first, rows);
      };
    }
  }
  // KV connectors: positions they fill go into the cache before each layer runs; saves follow each layer.
  std::vector<size_t> loaders, savers;
  if (!connectors_.empty()) {
    std::vector<std::vector<RequestId>> loads(connectors_.size());
    std::vector<KvStepChunk> chunks;
    for (const ScheduledChunk& c : sch.chunks) {
      const Sequence& s = *c.seq;
      const Active& a = *active_.at(static_cast<RequestId>(s.id));
      for (const Active::KvRange& r : a.ranges) {
        if (a.pending_load && r.count > 0) loads[r.connector].push_back(a.id);
      }
      if (s.uncached) continue;  // an embedding request's blocks are offered to no connector
      chunks.push_back({a.id, s.kv.blocks, s.kv.length, s.kv.length + c.num_tokens, s.prompt_len});
    }
    Status st;
    for (size_t i = 0; i < connectors_.size() && st.ok(); ++i) {
      if (loads[i].empty()) continue;
      st = connectors_[i]->start_load(loads[i]);
      loaders.push_back(i);
    }
    if (!st.ok()) {
      log::error("KV connector {} could not start its loads: {}", connectors_[loaders.back()]->name(), st.to_string());
      for (BlockHash h : checkpoints) runner_.kv_cache().checkpoint_written(h, false);
      for (const ScheduledChunk& c : sch.chunks)
        finish(*active_.at(static_cast<RequestId>(c.seq->id)), FinishReason::kError, st);
      return;
    }
    for (size_t i = 0; i < connectors_.size(); ++i) {
      if (connectors_[i]->start_save(chunks)) savers.push_back(i);
    }
  }
  ModelRunner::LayerHook before, after;
  // The connectors' layers are the full-attention layers (Engine::Io). The last one is saved after the model's
  // last layer, so that a hybrid model's recurrent state read with it has every linear layer of the step.
  const int kv_last = io_->geometry().n_layers - 1, model_last = runner_.config().n_layers - 1;
  if (!loaders.empty()) {
    before = [&](int layer) -> Status {
      const int kv = io_->kv_layer(layer);
      if (kv < 0) return ok_status();
      for (size_t i : loaders) TS_RETURN_IF_ERROR(connectors_[i]->wait_layer_load(kv));
      return ok_status();
    };
  }
  if (!savers.empty()) {
    after = [&](int layer) -> Status {
      const int kv = io_->kv_layer(layer);
      if (kv >= 0 && kv < kv_last) {
        for (size_t i : savers) TS_RETURN_IF_ERROR(connectors_[i]->save_layer(kv));
      }
      if (layer == model_last && kv_last >= 0) {
        for (size_t i : savers) TS_RETURN_IF_ERROR(connectors_[i]->save_layer(kv_last));
      }
      return ok_status();
    };
  }
  std::vector<float>& logits = step_logits_;  // reused: its capacity stays from step to step
  Status st = runner_.step(segments, logits, after, before);
  for (size_t i : savers) {
    Status saved = connectors_[i]->wait_save();
    if (st.ok()) st = saved;
  }
  counters_.steps++;
  for (BlockHash h : checkpoints) runner_.kv_cache().checkpoint_written(h, st.ok());
  if (!st.ok()) {
    log::error("engine step failed: {}", st.to_string());
    for (const ScheduledChunk& c : sch.chunks)
      finish(*active_.at(static_cast<RequestId>(c.seq->id)), FinishReason::kError, st);
    return;
  }
  scheduler_.commit(sch);
  for (const ScheduledChunk& c : sch.chunks) {
    Active& a = *active_.at(static_cast<RequestId>(c.seq->id));
    if (!a.pending_load) continue;
    a.pending_load = false;  // the ranges are in the cache now
    a.ranges.clear();
  }
  sample_rows(sch, segments, logits);
  finish_embeddings(sch);
}

// One sequence's draw from its row of the step's logits. Made on any of the device's host threads: it reads and
// writes only its own sequence's state (logits processors, grammar matcher, sampler and its random stream, all
// per sequence), so the tokens do not depend on which thread drew them.
struct Engine::Draw {
  Active* a = nullptr;
  size_t row = 0;
  bool fork = false;  // the first row of a request with n > 1: on_token, on the engine thread
  TokenId token = 0;
  bool refused = false;  // the grammar allows no token here
  double grammar_seconds = 0;
  std::vector<float> for_logprobs;  // the processed row, before the grammar's mask and the sampler
  std::optional<TokenLogprobs> logprobs;
};

void Engine::sample_rows(const Schedule& sch, std::span<const Segment> segments, std::vector<float>& logits) {
  draws_.resize(std::count_if(segments.begin(), segments.end(), [](const Segment& s) { return s.want_logits; }));
  size_t row = 0;
  for (size_t i = 0; i < sch.chunks.size(); ++i) {
    if (!segments[i].want_logits) continue;
    Draw& d = draws_[row];
    d.a = active_.at(static_cast<RequestId>(sch.chunks[i].seq->id)).get();
    d.row = row++;
    d.fork = d.a->req.n > 1 && !d.a->forked;
  }
  const auto vocab = static_cast<size_t>(runner_.config().vocab_size);
  runner_.for_each_on_host(static_cast<int64_t>(draws_.size()), [&](int64_t i) {
    Draw& d = draws_[static_cast<size_t>(i)];
    if (!d.fork) draw(d, std::span<float>(logits.data() + d.row * vocab, vocab));
  });
  // Taken in row order, as if drawn one after another: a draw reads nothing another row's acceptance changes.
  for (Draw& d : draws_) {
    Active& a = *d.a;
    if (d.fork) {
      on_token(a, logits, d.row);
      continue;
    }
    if (a.matcher) {
      counters_.grammar_seconds += d.grammar_seconds;
      counters_.grammar_tokens++;
    }
    if (d.refused) {
      finish(a, FinishReason::kError, internal_error("the request's grammar allows no token here"));
      continue;
    }
    accept_token(a, d.token, nullptr, d.logprobs ? &*d.logprobs : nullptr);
  }
}

void Engine::draw(Draw& d, std::span<float> l) {
  Active& a = *d.a;
  d.refused = false;
  d.grammar_seconds = 0;
  d.logprobs.reset();
  a.procs.apply(l, a.counts, a.seq.generated());
  if (a.req.logprobs >= 0) d.for_logprobs.assign(l.begin(), l.end());
  if (a.matcher) {
    const auto t0 = std::chrono::steady_clock::now();
    const bool any = apply_grammar_mask(*a.matcher, a.mask_words, l);
    d.grammar_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!any) {
      d.refused = true;
      return;
    }
  }
  d.token = a.sampler.sample(l);
  if (a.req.logprobs >= 0) d.logprobs = compute_logprobs(d.for_logprobs, d.token, a.req.logprobs);
}

void Engine::finish_embeddings(const Schedule& sch) {
  for (const ScheduledChunk& c : sch.chunks) {
    auto it = active_.find(static_cast<RequestId>(c.seq->id));
    if (it == active_.end() || it->second->finished || !it->second->req.pool) continue;
    Active& a = *it->second;
    if (a.seq.kv.length < a.seq.prompt_len) continue;
    a.pending.embedding = a.pooled.result();
    finish(a, FinishReason::kStop);  // frees its blocks (never registered in the prefix cache)
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
    r.kv_transfer.reset();  // connectors move the prompt's KV once, with choice 0
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
    c->seq.max_prefix = a.seq.max_prefix;
    c->cached_tokens = a.cached_tokens;
    c->submitted = a.submitted;
    c->scheduled = a.scheduled;
    c->prompt_lps = a.prompt_lps;
    if (c->req.grammar) c->matcher = std::move(make_matcher(c->req).value());  // the same replay passed submit()
    out.push_back(std::move(c));
  }
  return out;
}

void Engine::admit_choice(Active& a, std::unique_ptr<Active> choice, TokenId first, std::vector<float>* logprob_logits,
                          const TokenLogprobs* given) {
  Active& c = *choice;
  active_[c.id] = std::move(choice);
  accept_token(c, first, logprob_logits, given);
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

void Engine::accept_token(Active& a, TokenId tok, std::vector<float>* logprob_logits, const TokenLogprobs* given) {
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
  if (a.first_token == std::chrono::steady_clock::time_point{}) a.first_token = std::chrono::steady_clock::now();
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
  if (logprob_logits) {
    a.pending.logprobs.push_back(compute_logprobs(*logprob_logits, tok, a.req.logprobs));
  } else if (given != nullptr && a.req.logprobs >= 0) {
    a.pending.logprobs.push_back(*given);
  }
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

void Engine::publish_stats() {
  EngineStats s = counters_;
  s.waiting = scheduler_.waiting();
  s.running = scheduler_.running();
  s.kv_blocks_total = runner_.kv_cache().num_blocks();
  s.kv_blocks_used = runner_.kv_cache().blocks().used();
  s.kv_blocks_cached = runner_.kv_cache().blocks().cached();
  if (runner_.kv_cache().windowed()) {
    s.window_blocks_total = runner_.kv_cache().window_pool().num_blocks();
    s.window_blocks_used = runner_.kv_cache().window_pool().used();
  }
  s.kv_loading = scheduler_.loading();
  s.prefix = runner_.kv_cache().blocks().stats();
  s.prefix_cache_enabled = runner_.kv_cache().blocks().prefix_cache_enabled();
  s.state_slots_total = runner_.kv_cache().state_slots();
  s.state_checkpoints_total = runner_.kv_cache().state_checkpoints();
  s.state_checkpoints_used = runner_.kv_cache().state_checkpoints_held();
  s.state_slots_used = s.state_slots_total - runner_.kv_cache().free_state_slots();
  std::lock_guard<std::mutex> lock(mu_);
  stats_ = s;
}

bool Engine::reply_comes_back(const Active& a, int position) const {
  const int upto = position - a.seq.prompt_len;  // reply tokens before the state
  if (!a.req.reply_as_text || upto <= 0) return true;
  const auto reply = std::span(a.seq.tokens).subspan(static_cast<size_t>(a.seq.prompt_len));
  const std::vector<TokenId> back = tokenizer_.encode(tokenizer_.decode(reply), /*add_bos=*/false);
  return back.size() >= static_cast<size_t>(upto) && std::equal(back.begin(), back.begin() + upto, reply.begin());
}

void Engine::finish(Active& a, FinishReason reason, Status error) {
  if (a.finished) return;
  a.finished = true;
  const bool done = reason == FinishReason::kStop || reason == FinishReason::kLength;
  if (a.consulted && tell_connectors(a, done ? KvEnd::kFinished : KvEnd::kAborted)) {
    // A connector still moves this request's KV: its blocks stay held until the connector lets go (poll()).
    held_[a.id] = std::move(a.seq.kv.blocks);
    a.seq.kv.blocks.clear();
  }
  if (a.seq.kv.running_checkpoint != 0)
    runner_.kv_cache().end_reply(a.seq.kv, reply_comes_back(a, a.seq.kv.running_position));
  scheduler_.remove(&a.seq);
  if (a.text.size() > a.emitted) a.pending.text = a.text.substr(a.emitted);
  a.emitted = a.text.size();
  a.pending.finish = reason;
  a.pending.error = std::move(error);
  a.pending.prompt_tokens = a.seq.prompt_len;
  a.pending.completion_tokens = a.seq.generated();
  a.pending.cached_tokens = std::max(0, a.cached_tokens);
  {
    using Clock = std::chrono::steady_clock;
    const Clock::time_point now = Clock::now();
    const Clock::time_point scheduled = a.scheduled == Clock::time_point{} ? now : a.scheduled;
    const Clock::time_point first = a.first_token == Clock::time_point{} ? now : a.first_token;
    auto secs = [](Clock::time_point from, Clock::time_point to) {
      return std::max(0.0, std::chrono::duration<double>(to - from).count());
    };
    a.pending.timing = {secs(a.submitted, scheduled), secs(scheduled, first), secs(first, now)};
  }
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
