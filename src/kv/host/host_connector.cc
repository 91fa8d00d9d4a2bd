#include "kv/host/host_connector.h"

#include <chrono>
#include <cstring>

#include <fmt/core.h>

#include "base/log.h"
#include "kv/block_copy.h"

namespace tessera::kv {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

Result<std::shared_ptr<HostConnector>> HostConnector::create(HostOptions options, std::string model_identity) {
  if (options.host_bytes == 0 && options.disk_dir.empty())
    return invalid_argument(
        "the host KV connector needs host memory (--kv-host-memory) or a disk tier (--kv-disk-dir)");
  if (!options.disk_dir.empty() && options.disk_bytes == 0)
    return invalid_argument("a KV disk tier (--kv-disk-dir) needs a size (--kv-disk-size MIB)");
  if (!options.disk_dir.empty() && model_identity.empty())
    return invalid_argument("a KV disk tier needs the model's identity, to keep other models' files apart");
  return std::shared_ptr<HostConnector>(new HostConnector(std::move(options), std::move(model_identity)));
}

HostConnector::~HostConnector() { disk_.reset(); }

std::shared_ptr<const HostBlock> HostConnector::find_block(engine::BlockHash hash, bool touch) {
  std::shared_ptr<const HostBlock> b = pool_.find(hash, touch);
  return b != nullptr && !b->state_only ? b : nullptr;
}

std::shared_ptr<const uint8_t> HostConnector::spilled_state(engine::BlockHash hash) {
  std::shared_ptr<const HostBlock> s = pool_.find(state_key(hash), /*touch=*/true);
  if (s == nullptr || !s->state_only || s->payload.size() != format_.geometry.state_bytes) return nullptr;
  return {s, s->payload.data()};
}

std::shared_ptr<const uint8_t> HostConnector::checkpoint(engine::BlockHash hash) {
  if (format_.geometry.state_bytes == 0) return nullptr;
  if (std::shared_ptr<const HostBlock> b = find_block(hash, /*touch=*/true); b != nullptr && format_.holds_state(*b))
    return {b, b->payload.data() + format_.state_offset()};
  return spilled_state(hash);
}

void HostConnector::checkpoint_evicted(engine::BlockHash hash, std::span<const std::byte> state) {
  const size_t state_bytes = format_.geometry.state_bytes;
  if (state_bytes == 0 || state.size() != state_bytes) return;
  auto rec = std::make_shared<HostBlock>();
  if (std::shared_ptr<const HostBlock> b = find_block(hash, /*touch=*/false); b != nullptr) {
    if (format_.holds_state(*b)) return;
    rec->hash = hash;  // its block is here already: the record with the state replaces it
    rec->payload.reserve(format_.payload_bytes(true));
    rec->payload = b->payload;
  } else {
    rec->hash = state_key(hash);  // its block is still on the device (or gone): the state alone, until it leaves
    rec->state_only = true;
    if (!pool_.contains(rec->hash)) counters_.states_alone++;
  }
  const auto* bytes = reinterpret_cast<const uint8_t*>(state.data());
  rec->payload.insert(rec->payload.end(), bytes, bytes + state_bytes);
  rec->checksum = payload_checksum(rec->payload);
  counters_.host_save_bytes += state_bytes;
  keep(std::move(rec));
}

void HostConnector::settle(Load& load) {
  load.state.reset();
  if (format_.geometry.state_bytes == 0) return;
  for (; load.arrived > 0; load.arrived--) {
    const auto last = static_cast<size_t>(load.arrived - 1);
    if (format_.holds_state(*load.blocks[last])) {
      load.state = {load.blocks[last], load.blocks[last]->payload.data() + format_.state_offset()};
      return;
    }
    if ((load.state = spilled_state(load.hashes[last])) != nullptr) return;
  }
}

Status HostConnector::attach(engine::KvBlockIo& io, std::function<void()> wake) {
  io_ = &io;
  wake_ = std::move(wake);
  format_.geometry = io.geometry();
  const engine::KvGeometry& g = format_.geometry;
  // The store key: whose KV this is and how it is laid out. Files under another key are never opened.
  format_.store_key = block_store_key(identity_, g);
  if (!options_.disk_dir.empty()) {
    DiskTierOptions d;
    d.dir = options_.disk_dir;
    d.capacity_bytes = options_.disk_bytes;
    d.max_pending_bytes = options_.max_pending_disk_bytes;
    TS_ASSIGN_OR_RETURN(disk_, DiskTier::open(std::move(d), format_, identity_));
    disk_->set_event_log(events_.load());  // what survived from a previous run is announced now
  }
  return ok_status();
}

void HostConnector::set_event_log(engine::KvEventLog* log) {
  events_ = log;
  if (disk_) disk_->set_event_log(log);
}

void HostConnector::keep(std::shared_ptr<const HostBlock> block) {
  engine::KvEventLog* events = events_.load();
  // A state alone is no block: no event, and it is not written to disk (its block takes it along when it leaves). A
  // record replacing one of the same block (now with the state) was announced already.
  if (events != nullptr && !block->state_only && !pool_.contains(block->hash))
    events->publish(engine::KvEventType::kStored, block->hash, engine::KvTier::kHost);
  // A state, alone or in its block's record, is announced under its block's hash (state_key is its own inverse).
  if (events != nullptr && (block->state_only || format_.holds_state(*block))) {
    events->publish_state(engine::KvEventType::kStored, block->state_only ? state_key(block->hash) : block->hash,
                          engine::KvTier::kHost);
  }
  for (std::shared_ptr<const HostBlock>& out : pool_.insert(std::move(block))) {
    if (out->state_only) {
      counters_.states_alone--;
      if (events != nullptr)
        events->publish_state(engine::KvEventType::kRemoved, state_key(out->hash), engine::KvTier::kHost);
      continue;
    }
    counters_.host_evicted++;
    if (events != nullptr) {
      events->publish(engine::KvEventType::kRemoved, out->hash, engine::KvTier::kHost);
      if (format_.holds_state(*out))
        events->publish_state(engine::KvEventType::kRemoved, out->hash, engine::KvTier::kHost);
    }
    if (disk_) disk_->write(std::move(out));
  }
}

void HostConnector::evicted(std::span<const engine::EvictedBlock> blocks) {
  // A hybrid model's block is of use only up to a block with the state after it: the device's checkpoint there, or
  // the one it gave back here earlier, goes along in the record (a record without it is replaced by one with it).
  const size_t state_bytes = format_.geometry.state_bytes;
  std::vector<engine::BlockId> ids;
  std::vector<std::shared_ptr<HostBlock>> out;
  std::vector<std::byte>& state = state_scratch_;  // reused: a state is megabytes
  state.resize(state_bytes);
  for (const engine::EvictedBlock& b : blocks) {
    const std::shared_ptr<const HostBlock> here = find_block(b.hash, /*touch=*/true);
    bool disk_state = false;
    const bool below = here != nullptr || (disk_ && disk_->contains(b.hash, &disk_state));
    if (below && (state_bytes == 0 || (here ? format_.holds_state(*here) : disk_state))) continue;  // nothing to add
    bool with_state = false;
    if (state_bytes > 0) {
      with_state = io_->read_checkpoint(b.hash, state);
      if (!with_state) {
        if (std::shared_ptr<const uint8_t> kept = spilled_state(b.hash); kept != nullptr) {
          std::memcpy(state.data(), kept.get(), state_bytes);
          with_state = true;
        }
      }
    }
    if (below && !with_state) continue;
    auto rec = std::make_shared<HostBlock>();
    rec->hash = b.hash;
    rec->payload.resize(format_.payload_bytes(with_state));
    if (with_state) std::memcpy(rec->payload.data() + format_.state_offset(), state.data(), state_bytes);
    ids.push_back(b.id);
    out.push_back(std::move(rec));
  }
  if (ids.empty()) return;
  const auto t0 = Clock::now();
  const size_t n = ids.size();
  std::vector<uint8_t*> payloads(n);
  for (size_t j = 0; j < n; ++j) payloads[j] = out[j]->payload.data();
  if (Status st = read_block_records(*io_, format_, ids, payloads, rows_); !st.ok()) {
    log::warn("host KV connector: could not copy {} evicted blocks out ({}); they are dropped", n, st.to_string());
    return;
  }
  for (auto& b : out) {
    b->checksum = payload_checksum(b->payload);
    counters_.host_save_bytes += b->payload.size();
    if (format_.holds_state(*b) && pool_.contains(state_key(b->hash))) {  // the record holds it now
      pool_.erase(state_key(b->hash));
      counters_.states_alone--;
    }
    keep(std::move(b));
  }
  counters_.host_save_seconds += since(t0);
}

engine::KvMatch HostConnector::match(const engine::KvRequestView& request, int supplied) {
  const int bt = format_.geometry.block_tokens;
  if (bt <= 0 || supplied % bt != 0) return {};
  const bool hybrid = format_.geometry.state_bytes > 0;
  // Whole blocks, never the last position (its logits are needed); a hybrid model's up to the last block with the
  // state after it.
  const size_t limit = std::min(request.block_hashes.size(), (request.tokens.size() - 1) / static_cast<size_t>(bt));
  size_t count = 0, usable = 0;
  bool async = false, usable_async = false;
  for (size_t i = static_cast<size_t>(supplied / bt); i < limit; ++i) {
    const engine::BlockHash h = request.block_hashes[i];
    bool state = false;
    if (const std::shared_ptr<const HostBlock> b = find_block(h, /*touch=*/false); b != nullptr) {
      state = format_.holds_state(*b);
    } else if (disk_ && disk_->contains(h, &state)) {
      async = true;
    } else {
      break;
    }
    ++count;
    if (hybrid && !state) state = pool_.contains(state_key(h));  // a state the device gave back, kept alone
    if (!hybrid || state) {
      usable = count;
      usable_async = async;
    }
  }
  return {
      .tokens = static_cast<int>(usable) * bt, .async = usable_async, .cached = true, .state = hybrid && usable > 0};
}

void HostConnector::allocated(const engine::KvRequestView& request, std::span<const engine::BlockId> blocks, int first,
                              int count) {
  if (count == 0) return;
  const int bt = format_.geometry.block_tokens;
  const size_t b0 = static_cast<size_t>(first / bt), nb = static_cast<size_t>(count / bt);
  auto load = std::make_shared<Load>();
  load->id = request.id;
  load->device.assign(blocks.begin() + static_cast<std::ptrdiff_t>(b0),
                      blocks.begin() + static_cast<std::ptrdiff_t>(b0 + nb));
  load->hashes.assign(request.block_hashes.begin() + static_cast<std::ptrdiff_t>(b0),
                      request.block_hashes.begin() + static_cast<std::ptrdiff_t>(b0 + nb));
  load->blocks.resize(nb);
  load->from_disk.assign(nb, false);
  std::vector<engine::BlockHash> reads;
  for (size_t j = 0; j < nb; ++j) {
    // Held by the load from now on: the pool may evict the entry meanwhile, the bytes stay.
    load->blocks[j] = find_block(load->hashes[j], /*touch=*/true);
    if (load->blocks[j] == nullptr) {
      load->from_disk[j] = true;
      reads.push_back(load->hashes[j]);
    }
  }
  loads_[request.id] = load;
  if (reads.empty()) {
    load->ready = true;
    load->arrived = static_cast<int>(nb);
    settle(*load);  // as match() found it: nothing changed the pool since
    return;
  }
  if (!disk_) {  // cannot happen: match() found them in memory and nothing changed the pool since
    load->ready = true;
    while (load->arrived < static_cast<int>(nb) && load->blocks[static_cast<size_t>(load->arrived)]) load->arrived++;
    settle(*load);
    return;
  }
  load->cancelled = std::make_shared<std::atomic<bool>>(false);
  disk_->read(std::move(reads), load->cancelled, [this, load](std::vector<std::shared_ptr<const HostBlock>> got) {
    {
      std::lock_guard<std::mutex> lock(done_mu_);
      done_.emplace_back(load, std::move(got));
    }
    if (wake_) wake_();
  });
}

engine::KvPoll HostConnector::poll() {
  decltype(done_) done;
  {
    std::lock_guard<std::mutex> lock(done_mu_);
    done.swap(done_);
  }
  engine::KvPoll out;
  const int bt = format_.geometry.block_tokens;
  for (auto& [load, got] : done) {
    auto it = loads_.find(load->id);
    if (it == loads_.end() || it->second != load) continue;  // the request ended meanwhile
    size_t g = 0;
    for (size_t j = 0; j < load->blocks.size() && g < got.size(); ++j) {
      if (load->from_disk[j]) load->blocks[j] = got[g++];
    }
    for (const auto& b : got) keep(b);  // read back: the most recently used of host memory now
    while (load->arrived < static_cast<int>(load->blocks.size()) &&
           load->blocks[static_cast<size_t>(load->arrived)] != nullptr) {
      load->arrived++;
    }
    settle(*load);
    load->ready = true;
    out.loads.push_back({load->id, load->arrived * bt, {}});
  }
  return out;
}

bool HostConnector::finished(engine::RequestId id, engine::KvEnd) {
  auto it = loads_.find(id);
  if (it != loads_.end()) {
    if (it->second->cancelled) *it->second->cancelled = true;
    loads_.erase(it);
  }
  return false;  // its blocks are written on the engine thread only, within wait_layer_load
}

Status HostConnector::start_load(std::span<const engine::RequestId> ids) {
  loading_now_.clear();
  for (engine::RequestId id : ids) {
    auto it = loads_.find(id);
    if (it == loads_.end() || !it->second->ready) {
      return internal_error(fmt::format("host KV connector: request {} has no load ready", id));
    }
    loading_now_.push_back(it->second);
  }
  // A hybrid model's state after the last block, before the step's first (linear) layer runs.
  const size_t state_bytes = format_.geometry.state_bytes;
  for (const auto& load : loading_now_) {
    if (state_bytes == 0 || load->arrived == 0) continue;
    if (load->state == nullptr)
      return internal_error(fmt::format("host KV connector: request {}'s last block has no state", load->id));
    TS_RETURN_IF_ERROR(
        io_->write_state(load->id, {reinterpret_cast<const std::byte*>(load->state.get()), state_bytes}));
  }
  return ok_status();
}

Status HostConnector::wait_layer_load(int layer) {
  if (loading_now_.empty()) return ok_status();
  const auto t0 = Clock::now();
  const size_t half = format_.half();
  for (const auto& load : loading_now_) {
    const auto n = static_cast<size_t>(load->arrived);
    if (n == 0) continue;
    std::vector<const uint8_t*> payloads(n);
    for (size_t j = 0; j < n; ++j) payloads[j] = load->blocks[j]->payload.data();
    TS_RETURN_IF_ERROR(write_block_layer(*io_, format_, layer, std::span(load->device).first(n), payloads, rows_)
                           .with_context("loading KV blocks from host memory"));
    counters_.host_load_bytes += 2 * n * half;
  }
  counters_.host_load_seconds += since(t0);
  if (layer + 1 < format_.geometry.n_layers) return ok_status();
  const int bt = format_.geometry.block_tokens;
  for (const auto& load : loading_now_) {
    const auto n = static_cast<size_t>(load->arrived);
    for (size_t j = 0; j < n; ++j) (load->from_disk[j] ? counters_.disk_hit_tokens : counters_.host_hit_tokens) += bt;
    loads_.erase(load->id);
  }
  loading_now_.clear();
  return ok_status();
}

engine::KvConnectorStats HostConnector::stats() const {
  engine::KvConnectorStats s;
  s.connector = std::string(kHostConnector);
  engine::KvTierStats h;
  h.tier = "host";
  h.prefix_cache = true;
  h.hit_tokens = counters_.host_hit_tokens;
  h.load_bytes = counters_.host_load_bytes;
  h.save_bytes = counters_.host_save_bytes;
  h.load_seconds = counters_.host_load_seconds;
  h.save_seconds = counters_.host_save_seconds;
  h.blocks = pool_.blocks() - counters_.states_alone;  // records of blocks; `bytes` counts the states kept alone too
  h.bytes = pool_.bytes();
  h.capacity_bytes = pool_.capacity();
  h.evicted_blocks = counters_.host_evicted;
  s.tiers.push_back(h);
  if (disk_) {
    const DiskTierStats d = disk_->stats();
    engine::KvTierStats t;
    t.tier = "disk";
    t.prefix_cache = true;
    t.hit_tokens = counters_.disk_hit_tokens;
    t.load_bytes = d.read_bytes;
    t.load_seconds = d.read_seconds;
    t.save_bytes = d.written_bytes;
    t.save_seconds = d.write_seconds;
    t.blocks = d.blocks;
    t.bytes = d.bytes;
    t.capacity_bytes = d.capacity_bytes;
    t.evicted_blocks = d.evicted_blocks + d.dropped_writes;
    t.failed_blocks = d.failed_blocks;
    s.tiers.push_back(t);
  }
  return s;
}

Result<std::shared_ptr<engine::KvConnector>> make_host_connector(const ConnectorSpec& spec) {
  TS_ASSIGN_OR_RETURN(HostOptions o, connector_options<HostOptions>(spec, kHostConnector));
  TS_ASSIGN_OR_RETURN(std::shared_ptr<HostConnector> c, HostConnector::create(std::move(o), spec.model_identity));
  return std::shared_ptr<engine::KvConnector>(std::move(c));
}

}  // namespace tessera::kv
