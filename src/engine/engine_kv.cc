// The engine's half of the KV connector contract (engine/kv_connector.h): its device access for connectors, the
// scheduler's ExternalKv, the ends of asynchronous loads, what connectors hear when a request ends, and the state
// checkpoints a step fills (the device prefix cache's own hand-off for hybrid models).
#include <algorithm>
#include <mutex>

#include <fmt/core.h>

#include "base/log.h"
#include "engine/engine.h"
#include "engine/internal/active.h"
#include "engine/internal/kv_parts.h"
#include "engine/kv_fork.h"

namespace tessera::engine {

namespace {

KvRequestView view_of(const GenerationRequest& req, RequestId id, const Sequence& s,
                      const std::vector<BlockHash>& hashes) {
  KvRequestView v;
  v.id = id;
  v.tokens = s.tokens;
  v.prompt_len = s.prompt_len;
  v.block_hashes = hashes;
  v.choices = req.n;
  v.params = req.kv_transfer;
  return v;
}

}  // namespace

Status Engine::add_connector(std::shared_ptr<KvConnector> connector) {
  if (!connector) return invalid_argument("add_connector: no connector");
  if (thread_.joinable()) {
    // Running: joins between steps, on the engine thread (the only one that reads the list unlocked).
    Status st;
    TS_RETURN_IF_ERROR(run_on_engine_thread([&] { st = add_connector_now(std::move(connector)); }));
    return st;
  }
  return add_connector_now(std::move(connector));
}

Status Engine::add_connector_now(std::shared_ptr<KvConnector> connector) {
  // A connector that keeps whole blocks needs every layer's rows of them; a windowed cache has given its sliding
  // layers' old rows back.
  if (runner_.kv_cache().windowed() && !connector->works_with_windows())
    return failed_precondition(fmt::format(
        "KV connector '{}' needs every layer's K and V at every position, but this {} model's sliding-window layers "
        "keep only their window of {} (create the runner with KvCacheOptions::window_kv off)",
        connector->name(), runner_.config().arch, runner_.kv_cache().window()));
  for (const auto& c : connectors_) {
    if (c->name() == connector->name())
      return already_exists(fmt::format("KV connector '{}' is already attached", connector->name()));
  }
  auto wake = [state = wake_] {
    std::lock_guard<std::mutex> lock(state->mu);
    if (state->engine == nullptr) return;
    {
      std::lock_guard<std::mutex> engine_lock(state->engine->mu_);
      state->engine->kicked_ = true;
    }
    state->engine->cv_.notify_one();
  };
  connector->set_event_log(&kv_events_);
  TS_RETURN_IF_ERROR(connector->attach(*io_, std::move(wake))
                         .with_context(fmt::format("attaching KV connector '{}'", connector->name())));
  {
    std::lock_guard<std::mutex> lock(connectors_mu_);
    connectors_.push_back(std::move(connector));
  }
  scheduler_.set_external(external_.get());
  runner_.kv_cache().set_eviction_handler([this](std::span<const EvictedBlock> blocks) {
    for (const auto& c : connectors_) c->evicted(blocks);
  });
  // Hybrid models: the state checkpoints the device gives back go to the connectors, which may offer them again.
  runner_.kv_cache().set_checkpoint_spill(
      [this](BlockHash hash, std::span<const uint8_t> state) {
        for (const auto& c : connectors_) c->checkpoint_evicted(hash, std::as_bytes(state));
      },
      [this](BlockHash hash) -> std::shared_ptr<const uint8_t> {
        for (const auto& c : connectors_) {
          if (std::shared_ptr<const uint8_t> s = c->checkpoint(hash); s != nullptr) return s;
        }
        return nullptr;
      });
  return ok_status();
}

std::vector<KvConnectorStats> Engine::connector_stats() const {
  std::lock_guard<std::mutex> lock(connectors_mu_);
  std::vector<KvConnectorStats> out;
  for (const auto& c : connectors_) out.push_back(c->stats());
  return out;
}

const KvGeometry& Engine::kv_geometry() const { return io_->geometry(); }

ExternalKv::Match Engine::match_external(Active& a) {
  Sequence& s = a.seq;
  a.ranges.clear();
  a.consulted = true;
  a.local_tokens = s.kv.length;
  const int bt = runner_.kv_cache().block_tokens();
  if (a.hashes.size() != s.tokens.size() / static_cast<size_t>(bt)) a.hashes = BlockManager::chain_hashes(s.tokens, bt);
  const KvRequestView v = view_of(a.req, a.id, s, a.hashes);
  const int total = static_cast<int>(s.tokens.size());
  int supplied = s.kv.length;
  bool async = false;
  for (size_t i = 0; i < connectors_.size() && supplied < total; ++i) {
    const KvMatch m = connectors_[i]->match(v, supplied);
    // Only an async load that reaches the end of a fresh prompt may bring the first tokens; every other match
    // leaves the engine a position to compute (its logits are needed).
    const bool ends = m.first_tokens && m.async && s.generated() == 0 && supplied + m.tokens == total;
    Active::KvRange r;
    r.connector = i;
    r.first = supplied;
    r.count = std::max(0, std::min(m.tokens, total - supplied - (ends ? 0 : 1)));
    // A hybrid model goes on from the recurrent state after the last position it has: a range takes positions only
    // with that state, the prompt end's (with the first tokens) or the one after exactly its positions
    // (KvMatch::state); positions loaded without it would continue from a state that does not match them.
    const bool hybrid = io_->geometry().state_bytes > 0;
    const bool state = hybrid && m.state && !ends && r.count == m.tokens;
    if (hybrid && !ends && !state) r.count = 0;
    r.async = m.async && r.count > 0;
    r.cached = m.cached;
    r.first_tokens = ends && r.count > 0;
    r.state = state && r.count > 0;
    supplied += r.count;
    async = async || r.async;
    a.ranges.push_back(std::move(r));
  }
  return {supplied - s.kv.length, async};
}

void Engine::allocated_external(Active& a, int local) {
  const KvRequestView v = view_of(a.req, a.id, a.seq, a.hashes);
  bool any = false;
  for (const Active::KvRange& r : a.ranges) {
    connectors_[r.connector]->allocated(v, a.seq.kv.blocks, r.first, r.count);
    any = any || r.count > 0;
  }
  if (a.seq.external_async) {
    a.loading = true;
    return;
  }
  a.pending_load = any;
  // The state a range brings (written in its start_load) replaces a checkpoint the prefix cache found for the local
  // part.
  if (std::any_of(a.ranges.begin(), a.ranges.end(), [](const Active::KvRange& r) { return r.state && r.count > 0; }))
    runner_.kv_cache().restored(a.seq.kv);
  int cached = local, elsewhere = 0;
  for (const Active::KvRange& r : a.ranges) (r.cached ? cached : elsewhere) += r.count;
  a.admitted(cached);
  counters_.kv_loaded_tokens += static_cast<uint64_t>(cached - local + elsewhere);
  counters_.prompt_tokens += static_cast<uint64_t>(elsewhere);
}

void Engine::take_checkpoints(const ScheduledChunk& c, Segment& seg, std::vector<BlockHash>& filled) {
  for (int i = 0; i < c.num_states; ++i) {
    const ScheduledChunk::StateAt& at = c.states[static_cast<size_t>(i)];
    KvCache& kv = runner_.kv_cache();
    // A reply that would not come back as its tokens so far takes no running checkpoint: it would push out a state
    // that serves for one no prompt reaches.
    if (at.running && !reply_comes_back(*active_.at(static_cast<RequestId>(c.seq->id)), at.position)) continue;
    // Its pair is the prompt's end once the state holds reply tokens (before that it is a prompt's state).
    const BlockHash pair = at.position > c.seq->prompt_len ? at.prompt_end : BlockHash{0};
    uint8_t* out = at.running ? kv.running_checkpoint_buffer(c.seq->kv, at.hash, at.position, pair)
                              : kv.checkpoint_buffer(at.hash);
    if (out != nullptr) {
      seg.states[static_cast<size_t>(seg.num_states++)] = {at.position, out};
      filled.push_back(at.hash);
    }
  }
}

void Engine::poll_connectors() {
  for (size_t i = 0; i < connectors_.size(); ++i) {
    KvPoll p = connectors_[i]->poll();
    for (RequestId id : p.released) {
      auto it = held_.find(id);
      if (it == held_.end()) continue;
      for (BlockId b : it->second) runner_.kv_cache().blocks().release(b);
      held_.erase(it);
    }
    for (KvLoadDone& d : p.loads) {
      auto it = active_.find(d.id);
      if (it == active_.end() || it->second->finished || !it->second->loading) continue;  // ended meanwhile
      Active& a = *it->second;
      bool waiting = false;
      for (Active::KvRange& r : a.ranges) {
        if (r.connector == i && r.async && !r.done) {
          r.done = true;
          r.arrived = std::clamp(d.tokens, 0, r.count);
          if (r.first_tokens) {
            r.tokens = std::move(d.first_tokens);
            r.logprobs = std::move(d.first_logprobs);
          }
        }
        waiting = waiting || (r.async && !r.done);
      }
      if (!waiting) complete_load(a);
    }
  }
}

void Engine::complete_load(Active& a) {
  Sequence& s = a.seq;
  const model::ModelConfig& c = runner_.config();
  int valid = a.local_tokens;
  bool short_load = false;
  for (Active::KvRange& r : a.ranges) {
    if (r.count == 0) continue;
    if (r.first != valid) {  // after a range that came short: what it would have filled is computed here
      r.count = 0;
      continue;
    }
    int got = r.async ? r.arrived : r.count;
    if (r.first_tokens && got == r.count) {
      const bool good =
          static_cast<int>(r.tokens.size()) == a.req.n &&
          std::all_of(r.tokens.begin(), r.tokens.end(), [&](TokenId t) { return t >= 0 && t < c.vocab_size; });
      if (!good) {
        log::warn("KV connector {} brought {} first tokens for {} choices; computing the prompt here",
                  connectors_[r.connector]->name(), r.tokens.size(), a.req.n);
        got = 0;
      }
    }
    // A hybrid model's state came with the last position: a load that fell short carries none of it, unless the
    // range brings the state after its positions (it reports only positions whose state it has).
    if (got < r.count && io_->geometry().state_bytes > 0 && !r.state) got = 0;
    if (got < r.count) {
      short_load = true;
      r.count = got;
      r.first_tokens = false;
    }
    valid = r.first + r.count;
  }
  if (short_load) counters_.kv_load_shortfalls++;
  a.loading = false;
  scheduler_.finish_loading(&s, valid);
  // A windowed cache took the sliding layers' blocks for the window after every promised position (Scheduler's
  // window_from): after a shortfall those hold nothing yet, and the steps that compute the rest take the window
  // blocks they need (the positions that arrived are written during the first of them, into the window it reads).
  runner_.kv_cache().drop_window_after(s.kv, valid);
  int cached = a.local_tokens, elsewhere = 0;
  bool ends = false, stated = false;
  for (const Active::KvRange& r : a.ranges) {
    (r.cached ? cached : elsewhere) += r.count;
    ends = ends || (r.first_tokens && r.count > 0);
    stated = stated || (r.state && r.count > 0);
  }
  // A hybrid model's state came with the prompt's end or a range's last position: a state checkpoint the prefix
  // cache found for the local part must not replace it (after a shortfall with none it is what the rest is computed
  // from).
  if (ends || stated) runner_.kv_cache().restored(s.kv);
  a.admitted(cached);
  counters_.kv_loaded_tokens += static_cast<uint64_t>(cached - a.local_tokens + elsewhere);
  counters_.prompt_tokens += static_cast<uint64_t>(elsewhere);
  a.pending_load = valid > a.local_tokens;
  if (!ends || valid != static_cast<int>(s.tokens.size())) return;  // the rest is computed by later steps

  // The whole prompt arrived with its first tokens: into the cache now, then straight to decoding.
  std::vector<TokenId> first;
  std::vector<TokenLogprobs> first_logprobs;  // empty, or one per choice
  for (Active::KvRange& r : a.ranges) {
    if (!r.first_tokens) continue;
    first = std::move(r.tokens);
    if (r.logprobs.size() == first.size()) first_logprobs = std::move(r.logprobs);
  }
  auto logprobs_of = [&](size_t i) { return first_logprobs.empty() ? nullptr : &first_logprobs[i]; };
  if (!load_now(a)) return;
  scheduler_.commit(Schedule{{{&s, 0}}, {}, {}});  // register the loaded full blocks for prefix reuse
  a.sampler.skip_draw();  // the node that computed the prompt drew the first token with this request's seed
  if (a.req.n > 1) {
    a.forked = true;
    std::vector<std::unique_ptr<Active>> choices = make_choices(a);
    for (size_t i = 0; i < choices.size(); ++i) {
      choices[i]->sampler.skip_draw();
      admit_choice(a, std::move(choices[i]), first[i + 1], nullptr, logprobs_of(i + 1));
    }
  }
  accept_token(a, first[0], nullptr, logprobs_of(0));
}

bool Engine::load_now(Active& a) {
  runner_.kv_cache().flush_evictions();  // before any write: blocks just allocated may hold cached KV
  std::vector<size_t> used;
  const RequestId id = a.id;
  Status st;
  for (const Active::KvRange& r : a.ranges) {
    if (r.count == 0 || !st.ok()) continue;
    st = connectors_[r.connector]->start_load(std::span(&id, 1));
    used.push_back(r.connector);
  }
  for (int l = 0; st.ok() && l < io_->geometry().n_layers; ++l) {
    for (size_t i : used) {
      st = connectors_[i]->wait_layer_load(l);
      if (!st.ok()) break;
    }
  }
  a.pending_load = false;
  if (st.ok()) {
    a.ranges.clear();
    return true;
  }
  // The prompt is computed here instead, from what the device cache held at admission.
  log::warn("request {}: loading its KV failed ({}); computing it here", id, st.to_string());
  counters_.kv_load_shortfalls++;
  a.seq.kv.length = a.local_tokens;
  runner_.kv_cache().drop_window_after(a.seq.kv, a.local_tokens);
  a.ranges.clear();
  return false;
}

bool Engine::tell_connectors(Active& a, KvEnd end) {
  bool hold = false;
  for (const auto& c : connectors_) hold = c->finished(a.id, end) || hold;
  if (end == KvEnd::kPreempted) return false;  // its blocks are already back in the pool
  return hold;
}

}  // namespace tessera::engine
