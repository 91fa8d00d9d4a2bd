#include "kv/pool/pool_connector.h"

#include <unistd.h>

#include <cstring>
#include <map>
#include <random>
#include <set>

#include <fmt/core.h>
#include <fmt/ranges.h>

#include "base/log.h"
#include "kv/block_copy.h"

namespace tessera::kv {
namespace {

using Clock = std::chrono::steady_clock;
// The embedded store bounds the keys of one lease (ctrl::MemoryLimits::max_keys_per_lease, 1024).
constexpr uint32_t kSlotsPerLease = 1000;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

bool is_state(const std::optional<PoolEntry>& e) { return e && e->state; }

}  // namespace

Result<std::shared_ptr<PoolConnector>> PoolConnector::create(PoolOptions options, std::string model_identity) {
  if (options.pool_bytes == 0) return invalid_argument("the KV pool needs memory (--kv-pool-memory MIB)");
  if (options.store == nullptr)
    return invalid_argument("the KV pool needs the cluster's control plane (--ctrl), shared by every node of the pool");
  if (model_identity.empty()) return invalid_argument("the KV pool needs the model's identity, to keep models apart");
  if (options.lease_ttl < std::chrono::milliseconds(300))
    return invalid_argument("the KV pool's lease TTL must be at least 300 ms");
  if (options.staging_slots == 0) options.staging_slots = 1;
  std::shared_ptr<PoolConnector> c(new PoolConnector(std::move(options), std::move(model_identity)));
  link::AgentOptions ao;
  ao.name = c->options_.agent_name.empty() ? fmt::format("kvpool-{}-{}", getpid(), std::random_device{}() % 1000000)
                                           : c->options_.agent_name;
  ao.endpoints = c->options_.endpoints;
  ao.host = c->options_.host;
  ao.link.cluster_token = c->options_.cluster_token;
  TS_ASSIGN_OR_RETURN(c->agent_, link::Agent::create(ao));
  return c;
}

PoolConnector::~PoolConnector() {
  {
    std::lock_guard<std::mutex> lock(pub_mu_);
    stop_ = true;
  }
  pub_cv_.notify_all();
  {
    std::lock_guard<std::mutex> lock(fetch_mu_);
    fetch_stop_ = true;
  }
  fetch_cv_.notify_all();
  if (publisher_.joinable()) publisher_.join();
  if (fetcher_.joinable()) fetcher_.join();
  watch_.reset();
  // Our entries go at once rather than when the leases lapse: no peer reads a region that is about to vanish.
  for (ctrl::LeaseId lease : leases_) (void)options_.store->revoke(lease);
  if (agent_) agent_->shutdown(std::chrono::milliseconds(200));
}

Status PoolConnector::attach(engine::KvBlockIo& io, std::function<void()> wake) {
  io_ = &io;
  wake_ = std::move(wake);
  format_.geometry = io.geometry();
  const engine::KvGeometry& g = format_.geometry;
  format_.store_key = block_store_key(identity_, g);
  slot_bytes_ = kBlockHeaderBytes + format_.payload_bytes();
  size_t state_slots = 0;
  if (hybrid()) {
    // Half of the region keeps states (a prompt's one or two states weigh as much as its blocks or more), at least
    // one beside at least one block.
    state_slot_bytes_ = kBlockHeaderBytes + g.state_bytes;
    state_slots = options_.pool_bytes / 2 / state_slot_bytes_;
    if (state_slots == 0 && options_.pool_bytes >= state_slot_bytes_ + slot_bytes_) state_slots = 1;
    if (state_slots == 0)
      return invalid_argument(fmt::format(
          "--kv-pool-memory ({} bytes) holds no recurrent state record of this hybrid model ({} bytes) beside a "
          "KV block record ({} bytes); give it at least {} MiB",
          options_.pool_bytes, state_slot_bytes_, slot_bytes_,
          (state_slot_bytes_ + slot_bytes_ + (1u << 20) - 1) >> 20));
  }
  const size_t slots = (options_.pool_bytes - state_slots * state_slot_bytes_) / slot_bytes_;
  if (slots == 0)
    return invalid_argument(fmt::format("--kv-pool-memory ({} bytes) holds no KV block record of {} bytes",
                                        options_.pool_bytes, slot_bytes_));
  if (slots + state_slots > UINT32_MAX) return invalid_argument("--kv-pool-memory holds too many blocks");
  block_slots_ = static_cast<uint32_t>(slots);
  TS_ASSIGN_OR_RETURN(region_, agent_->allocate_region(slots * slot_bytes_ + state_slots * state_slot_bytes_));
  TS_ASSIGN_OR_RETURN(region_bytes_, agent_->host_bytes(region_));
  // Staging: a batch of block records, then (hybrid) one state record.
  const size_t staging = std::min<size_t>(options_.staging_slots, slots);
  TS_ASSIGN_OR_RETURN(staging_, agent_->allocate_region(staging * slot_bytes_ + state_slot_bytes_));
  TS_ASSIGN_OR_RETURN(staging_bytes_, agent_->host_bytes(staging_));
  slots_ = std::make_unique<SlotTable>(static_cast<uint32_t>(slots));
  if (state_slots > 0) state_slots_ = std::make_unique<SlotTable>(static_cast<uint32_t>(state_slots));
  index_ = std::make_unique<PoolIndex>(format_.store_key, agent_->name());
  ctrl::Store& store = *options_.store;
  for (size_t s = 0; s < slots + state_slots; s += kSlotsPerLease) {
    TS_ASSIGN_OR_RETURN(ctrl::LeaseId lease, store.grant_lease(options_.lease_ttl));
    leases_.push_back(lease);
  }
  TS_RETURN_IF_ERROR(store.put(pool_agent_key(agent_->name()), agent_->info().encode(), leases_[0])
                         .with_context("publishing the KV pool's link agent"));
  // The watch first, then the snapshot: nothing that changes in between is missed (a change seen twice is
  // applied twice, which is harmless; a stale entry costs one failed read, never a wrong block).
  TS_ASSIGN_OR_RETURN(watch_, store.watch(std::string(kPoolPrefix),
                                          [this](const std::vector<ctrl::WatchEvent>& events, const Status& status) {
                                            if (!status.ok()) {
                                              resync_ = true;  // the publisher re-reads the whole index
                                              pub_cv_.notify_all();
                                              return;
                                            }
                                            index_->apply(events);
                                          }));
  TS_RETURN_IF_ERROR(resync_index());
  if (options_.corrupt_slots)
    log::warn("KV pool: TESSERA_KV_POOL_CORRUPT=1: every published block is corrupted (a test's fault)");
  log::info("KV pool: {} slots of {} bytes{} in link agent {} ({}), store key {:016x}", slots, slot_bytes_,
            state_slots > 0 ? fmt::format(" and {} state slots of {} bytes", state_slots, state_slot_bytes_) : "",
            agent_->name(), fmt::join(options_.endpoints, ","), format_.store_key);
  publisher_ = std::thread([this] { publisher_loop(); });
  fetcher_ = std::thread([this] { fetcher_loop(); });
  return ok_status();
}

Status PoolConnector::resync_index() {
  TS_ASSIGN_OR_RETURN(std::vector<ctrl::KeyValue> kvs, options_.store->range(std::string(kPoolPrefix)));
  index_->reset(kvs);
  return ok_status();
}

// ---- saving: engine thread, then the publisher thread ----

bool PoolConnector::held_here(engine::BlockHash key) const {
  const std::optional<PoolEntry> held = index_->find(key);
  return held && held->agent == agent_->name();
}

void PoolConnector::evicted(std::span<const engine::EvictedBlock> blocks) {
  if (slots_ == nullptr) return;
  std::vector<engine::BlockId> ids;
  std::vector<engine::BlockHash> hashes;
  std::vector<Pending> out;
  for (const engine::EvictedBlock& b : blocks) {
    // A hybrid model's block takes the device's state checkpoint after it along (into a state slot of its own).
    if (state_slots_ != nullptr && !held_here(state_key(b.hash))) {
      state_scratch_.resize(format_.geometry.state_bytes);  // reused: a state is megabytes
      if (io_->read_checkpoint(b.hash, std::as_writable_bytes(std::span(state_scratch_))))
        out.push_back({.hash = b.hash, .payload = state_scratch_, .state = true});
    }
    if (held_here(b.hash)) continue;  // already in one of our slots
    ids.push_back(b.id);
    hashes.push_back(b.hash);
  }
  if (!ids.empty()) {
    const auto t0 = Clock::now();
    const size_t n = ids.size(), first = out.size();
    std::vector<uint8_t*> payloads(n);
    for (size_t j = 0; j < n; ++j) {
      out.push_back({.hash = hashes[j]});
      out.back().payload.resize(format_.payload_bytes());
    }
    for (size_t j = 0; j < n; ++j) payloads[j] = out[first + j].payload.data();
    if (Status st = read_block_records(*io_, format_, ids, payloads, rows_); !st.ok()) {
      log::warn("KV pool: could not copy {} evicted blocks out ({}); they are not published", n, st.to_string());
      out.resize(first);
    }
    counters_.save_seconds += since(t0);
  }
  queue(std::move(out));
}

void PoolConnector::checkpoint_evicted(engine::BlockHash hash, std::span<const std::byte> state) {
  // The device gives a state checkpoint back while it may still hold the block: the state goes into a state slot
  // now, the block when it leaves.
  if (state_slots_ == nullptr || state.size() != format_.geometry.state_bytes || held_here(state_key(hash))) return;
  Pending p{.hash = hash, .state = true};
  const auto* bytes = reinterpret_cast<const uint8_t*>(state.data());
  p.payload.assign(bytes, bytes + state.size());
  std::vector<Pending> out;
  out.push_back(std::move(p));
  queue(std::move(out));
}

std::shared_ptr<const uint8_t> PoolConnector::checkpoint(engine::BlockHash hash) {
  if (state_slots_ == nullptr) return nullptr;
  const std::optional<PoolEntry> e = index_->find(state_key(hash));
  if (!is_state(e) || e->agent != agent_->name() || e->bytes != state_slot_bytes_ ||
      e->offset + e->bytes > region_bytes_.size())
    return nullptr;
  // The publisher may be rewriting the slot (its entry goes first, but the mirror follows later): the checks decide.
  const auto* p = reinterpret_cast<const uint8_t*>(region_bytes_.data()) + e->offset;
  auto state = decode_state_record(format_, hash, std::span(p, e->bytes));
  if (!state.ok() || (*state)->checksum != e->checksum) return nullptr;
  return {*state, (*state)->payload.data()};
}

void PoolConnector::queue(std::vector<Pending> out) {
  if (out.empty()) return;
  {
    std::lock_guard<std::mutex> lock(pub_mu_);
    for (Pending& p : out) {
      pending_bytes_ += p.payload.size();
      pending_.push_back(std::move(p));
    }
    while (pending_bytes_ > options_.max_pending_bytes && !pending_.empty()) {
      pending_bytes_ -= pending_.front().payload.size();
      pending_.pop_front();
      counters_.dropped++;
    }
  }
  pub_cv_.notify_all();
}

void PoolConnector::publisher_loop() {
  const auto period = options_.lease_ttl / 3;
  auto next_renew = Clock::now() + period;
  for (;;) {
    std::deque<Pending> batch;
    {
      std::unique_lock<std::mutex> lock(pub_mu_);
      pub_cv_.wait_until(lock, next_renew, [&] { return stop_ || !pending_.empty() || resync_.load(); });
      if (stop_) return;
      batch.swap(pending_);
      pending_bytes_ = 0;
    }
    if (resync_.exchange(false)) {
      if (Status st = resync_index(); !st.ok()) {
        log::warn("KV pool: cannot re-read the index ({}); retrying", st.to_string());
        resync_ = true;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
    }
    for (Pending& b : batch) {
      if (Clock::now() >= next_renew) {
        renew_leases();
        next_renew = Clock::now() + period;
      }
      publish(std::move(b));
    }
    if (Clock::now() >= next_renew) {
      renew_leases();
      next_renew = Clock::now() + period;
    }
  }
}

size_t PoolConnector::slot_offset(bool state, uint32_t slot) const {
  return state ? static_cast<size_t>(block_slots_) * slot_bytes_ + static_cast<size_t>(slot) * state_slot_bytes_
               : static_cast<size_t>(slot) * slot_bytes_;
}

size_t PoolConnector::lease_of(bool state, uint32_t slot) const {
  return ((state ? static_cast<size_t>(block_slots_) : 0) + slot) / kSlotsPerLease;
}

Status PoolConnector::put_slot_key(engine::BlockHash key, bool state, uint32_t slot) {
  PoolEntry e;
  e.agent = agent_->name();
  e.region = link::to_u64(region_);
  e.offset = slot_offset(state, slot);
  e.bytes = state ? state_slot_bytes_ : slot_bytes_;
  e.checksum = slot_checksums_[key];
  e.state = state;
  return options_.store->put(pool_block_key(format_.store_key, key, e.agent), encode_pool_entry(e),
                             leases_[lease_of(state, slot)]);
}

void PoolConnector::publish(Pending block) {
  const auto t0 = Clock::now();
  SlotTable& table = block.state ? *state_slots_ : *slots_;
  const engine::BlockHash key = block.state ? state_key(block.hash) : block.hash;
  if (table.touch(key)) return;  // published already
  const std::optional<SlotTable::Claim> claim = table.claim(key);
  if (!claim) return;
  ctrl::Store& store = *options_.store;
  if (claim->replaced) {
    // The old entry goes before its bytes are overwritten; a reader whose mirror still has it fails the header or
    // checksum check and computes instead.
    slot_checksums_.erase(*claim->replaced);
    counters_.evicted++;
    Status st = store.remove(pool_block_key(format_.store_key, *claim->replaced, agent_->name()));
    if (!st.ok() && st.code() != StatusCode::kNotFound)
      log::debug("KV pool: could not remove a replaced record's entry: {}", st.to_string());
  }
  std::vector<uint8_t> bytes;
  uint64_t checksum = 0;
  if (block.state) {
    bytes = encode_state_record(format_, block.hash, block.payload);
    checksum = payload_checksum(block.payload);
  } else {
    HostBlock record;
    record.hash = block.hash;
    record.payload = std::move(block.payload);
    record.checksum = checksum = payload_checksum(record.payload);
    bytes = encode_block_file(format_, record);
  }
  if (options_.corrupt_slots) bytes[kBlockHeaderBytes + (bytes.size() - kBlockHeaderBytes) / 2] ^= 0x10;
  std::memcpy(region_bytes_.data() + slot_offset(block.state, claim->slot), bytes.data(), bytes.size());
  slot_checksums_[key] = checksum;
  if (Status st = put_slot_key(key, block.state, claim->slot); !st.ok()) {
    log::debug("KV pool: could not publish a record ({}); its slot is freed", st.to_string());
    slot_checksums_.erase(key);
    table.release(claim->slot);
    counters_.dropped++;
  } else {
    counters_.save_bytes += bytes.size();
  }
  counters_.used_slots = slots_->used();
  counters_.used_state_slots = state_slots_ ? state_slots_->used() : 0;
  counters_.save_seconds += since(t0);
}

void PoolConnector::renew_leases() {
  ctrl::Store& store = *options_.store;
  for (size_t g = 0; g < leases_.size(); ++g) {
    Status st = store.keep_alive(leases_[g]);
    if (st.ok()) continue;
    if (st.code() != StatusCode::kNotFound) {
      log::debug("KV pool: lease renewal failed ({}); retrying", st.to_string());
      continue;  // the store does not answer; only it knows whether the lease lives
    }
    // The store forgot the lease (it restarted, or we stalled past the TTL): a new one, and our keys again.
    auto lease = store.grant_lease(options_.lease_ttl);
    if (!lease.ok()) continue;
    leases_[g] = *lease;
    log::info("KV pool: lease {} was lost; publishing its blocks again", g);
    if (g == 0) (void)store.put(pool_agent_key(agent_->name()), agent_->info().encode(), leases_[0]);
    for (const auto& [key, slot] : slots_->held()) {
      if (lease_of(false, slot) == g) (void)put_slot_key(key, false, slot);
    }
    if (state_slots_ == nullptr) continue;
    for (const auto& [key, slot] : state_slots_->held()) {
      if (lease_of(true, slot) == g) (void)put_slot_key(key, true, slot);
    }
  }
}

// ---- loading: engine thread, then the fetch thread ----

engine::KvMatch PoolConnector::match(const engine::KvRequestView& request, int supplied) {
  const int bt = format_.geometry.block_tokens;
  if (index_ == nullptr || bt <= 0 || supplied % bt != 0) return {};
  // Whole blocks, never the last position (its logits are needed); a hybrid model's up to the last block whose
  // state some node holds.
  const size_t limit = std::min(request.block_hashes.size(), (request.tokens.size() - 1) / static_cast<size_t>(bt));
  size_t count = 0, usable = 0;
  for (size_t i = static_cast<size_t>(supplied / bt); i < limit && index_->find(request.block_hashes[i]); ++i) {
    count++;
    if (!hybrid() || is_state(index_->find(state_key(request.block_hashes[i])))) usable = count;
  }
  return {
      .tokens = static_cast<int>(usable) * bt, .async = usable > 0, .cached = true, .state = hybrid() && usable > 0};
}

void PoolConnector::allocated(const engine::KvRequestView& request, std::span<const engine::BlockId> blocks, int first,
                              int count) {
  if (count == 0 || index_ == nullptr) return;
  const int bt = format_.geometry.block_tokens;
  const size_t b0 = static_cast<size_t>(first / bt), nb = static_cast<size_t>(count / bt);
  auto load = std::make_shared<Load>();
  load->id = request.id;
  for (size_t j = 0; j < nb; ++j) {
    std::optional<PoolEntry> e = index_->find(request.block_hashes[b0 + j]);
    if (!e) break;  // gone since match(): the run ends here
    load->device.push_back(blocks[b0 + j]);
    load->hashes.push_back(request.block_hashes[b0 + j]);
    load->entries.push_back(std::move(*e));
  }
  // A hybrid model's run ends at its last block whose state is still held (none: the load brings nothing).
  while (hybrid() && !load->hashes.empty() &&
         !is_state(load->state_entry = index_->find(state_key(load->hashes.back())))) {
    load->device.pop_back();
    load->hashes.pop_back();
    load->entries.pop_back();
  }
  loads_[request.id] = load;
  {
    std::lock_guard<std::mutex> lock(fetch_mu_);
    fetch_queue_.push_back(load);
  }
  fetch_cv_.notify_all();
}

void PoolConnector::fetcher_loop() {
  for (;;) {
    std::shared_ptr<Load> load;
    {
      std::unique_lock<std::mutex> lock(fetch_mu_);
      if (!fetch_cv_.wait_for(lock, std::chrono::milliseconds(500),
                              [&] { return fetch_stop_ || !fetch_queue_.empty(); })) {
        lock.unlock();
        connect_peers();
        continue;
      }
      if (fetch_stop_) return;
      load = std::move(fetch_queue_.front());
      fetch_queue_.pop_front();
    }
    if (load->cancelled) continue;
    fetch(*load);
    {
      std::lock_guard<std::mutex> lock(done_mu_);
      done_.push_back(std::move(load));
    }
    if (wake_) wake_();
  }
}

void PoolConnector::connect_peers() {
  // While idle: a connection to every peer that publishes, so that a load does not pay the link handshake. A peer
  // that cannot be reached now is tried again at the next idle moment (or by the load that needs it).
  for (const std::string& peer : index_->agents()) {
    if (peer == agent_->name() || agent_->endpoint_to(peer).ok()) continue;
    if (Status st = ensure_connected(peer); !st.ok())
      log::debug("KV pool: cannot connect to {} yet: {}", peer, st.to_string());
  }
}

Status PoolConnector::ensure_connected(const std::string& agent) {
  if (agent_->endpoint_to(agent).ok()) return ok_status();
  TS_ASSIGN_OR_RETURN(std::string text, index_->agent_info(agent));
  TS_ASSIGN_OR_RETURN(link::AgentInfo info, link::AgentInfo::decode(text));
  if (info.name != agent) return invalid_argument("a KV pool agent entry names another agent");
  return agent_->connect(info);
}

void PoolConnector::fetch(Load& load) {
  const auto t0 = Clock::now();
  const size_t n = load.entries.size(), batch = staging_bytes_.size() / slot_bytes_;
  const std::string& self = agent_->name();
  std::set<std::string> broken;  // peers that failed in this load: the run ends at their first block anyway
  auto fail = [&](size_t j, const std::string& why) {
    counters_.failed++;
    log::warn("KV pool: block {:016x} from {} is not used ({}); the rest of the prefix is computed", load.hashes[j],
              load.entries[j].agent, why);
  };
  for (size_t base = 0; base < n; base += batch) {
    const size_t m = std::min(batch, n - base);
    // One batched read per peer (one round trip), its future shared by that peer's blocks.
    std::vector<link::TransferFuture> reads(m);
    std::map<std::string, std::pair<std::vector<link::Assignment>, std::vector<size_t>>> per_peer;
    size_t issued = m;
    for (size_t j = 0; j < m; ++j) {
      const PoolEntry& e = load.entries[base + j];
      if (e.bytes != slot_bytes_) {
        issued = j;
        break;
      }
      if (e.agent == self) continue;
      if (Status st = ensure_connected(e.agent); !st.ok()) {
        issued = j;
        break;
      }
      auto& [batch_of_peer, blocks_of_peer] = per_peer[e.agent];
      batch_of_peer.push_back({staging_, j * slot_bytes_, link::RegionId{e.region}, e.offset, e.bytes});
      blocks_of_peer.push_back(j);
    }
    for (auto& [peer, work] : per_peer) {
      const link::TransferFuture f = agent_->read(peer, std::move(work.first));
      for (size_t j : work.second) reads[j] = f;
    }
    const auto deadline = Clock::now() + options_.read_timeout;
    bool ended = false;
    for (size_t j = 0; j < m && !ended; ++j) {
      const PoolEntry& e = load.entries[base + j];
      if (j >= issued || load.cancelled) {
        if (j == issued && !load.cancelled) {
          fail(base + j, e.bytes != slot_bytes_ ? "its record has another size" : "its node cannot be reached");
        }
        ended = true;
        break;
      }
      std::span<const uint8_t> record;
      std::vector<uint8_t> own;
      if (e.agent == self) {
        if (e.offset + e.bytes > region_bytes_.size()) {
          fail(base + j, "its range is outside the pool region");
          ended = true;
          break;
        }
        const auto* p = reinterpret_cast<const uint8_t*>(region_bytes_.data()) + e.offset;
        own.assign(p, p + e.bytes);
        record = own;
      } else {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        if (!reads[j].wait_for(std::max(left, std::chrono::milliseconds(1)))) {
          fail(base + j, "the link read timed out");
          ended = true;
          break;
        }
        if (Status st = reads[j].status(); !st.ok()) {
          broken.insert(e.agent);
          fail(base + j, st.to_string());
          ended = true;
          break;
        }
        record = {reinterpret_cast<const uint8_t*>(staging_bytes_.data()) + j * slot_bytes_, e.bytes};
      }
      // The record decides: the header (store key, chain hash, geometry, its checksum), the payload's checksum,
      // and that checksum against the index entry (a slot rewritten since is another record).
      auto block = decode_block_file(format_, load.hashes[base + j], record);
      if (!block.ok()) {
        fail(base + j, block.status().to_string());
        ended = true;
        break;
      }
      if ((*block)->checksum != e.checksum) {
        fail(base + j, "its checksum is not the one published");
        ended = true;
        break;
      }
      load.blocks.push_back(std::move(*block));
      counters_.load_bytes += e.bytes;
    }
    // Reads still in flight are cancelled and drained before the staging region is used again.
    for (size_t j = 0; j < std::min(issued, m); ++j) {
      if (!reads[j].valid() || reads[j].ready()) continue;
      reads[j].cancel();
      (void)reads[j].wait_for(std::chrono::milliseconds(500));
    }
    if (ended) break;
  }
  // A hybrid model's blocks are of use only with the state after the last of them.
  if (hybrid() && !(n > 0 && load.blocks.size() == n && !load.cancelled && fetch_state(load, broken)))
    load.blocks.clear();
  // A broken connection is replaced on the next load that needs that peer (connect() replaces it).
  for (const std::string& peer : broken) {
    auto text = index_->agent_info(peer);
    if (!text.ok()) continue;
    if (auto info = link::AgentInfo::decode(*text); info.ok()) (void)agent_->connect(*info);
  }
  counters_.load_seconds += since(t0);
}

bool PoolConnector::fetch_state(Load& load, std::set<std::string>& broken) {
  const PoolEntry& e = *load.state_entry;
  const engine::BlockHash hash = load.hashes.back();
  auto fail = [&](const std::string& why) {
    counters_.failed++;
    log::warn("KV pool: the state after block {:016x} from {} is not used ({}); the prefix is computed", hash, e.agent,
              why);
    return false;
  };
  if (e.bytes != state_slot_bytes_) return fail("its record has another size");
  std::span<const uint8_t> record;
  std::vector<uint8_t> own;
  if (e.agent == agent_->name()) {
    if (e.offset + e.bytes > region_bytes_.size()) return fail("its range is outside the pool region");
    const auto* p = reinterpret_cast<const uint8_t*>(region_bytes_.data()) + e.offset;
    own.assign(p, p + e.bytes);
    record = own;
  } else {
    if (Status st = ensure_connected(e.agent); !st.ok()) return fail("its node cannot be reached");
    const size_t at = staging_bytes_.size() - state_slot_bytes_;
    link::TransferFuture f = agent_->read(e.agent, {{staging_, at, link::RegionId{e.region}, e.offset, e.bytes}});
    if (!f.wait_for(options_.read_timeout)) {
      f.cancel();
      (void)f.wait_for(std::chrono::milliseconds(500));
      return fail("the link read timed out");
    }
    if (Status st = f.status(); !st.ok()) {
      broken.insert(e.agent);
      return fail(st.to_string());
    }
    record = {reinterpret_cast<const uint8_t*>(staging_bytes_.data()) + at, e.bytes};
  }
  auto state = decode_state_record(format_, hash, record);
  if (!state.ok()) return fail(state.status().to_string());
  if ((*state)->checksum != e.checksum) return fail("its checksum is not the one published");
  counters_.load_bytes += e.bytes;
  load.state = std::move(*state);
  return true;
}

engine::KvPoll PoolConnector::poll() {
  std::vector<std::shared_ptr<Load>> done;
  {
    std::lock_guard<std::mutex> lock(done_mu_);
    done.swap(done_);
  }
  engine::KvPoll out;
  const int bt = format_.geometry.block_tokens;
  for (auto& load : done) {
    auto it = loads_.find(load->id);
    if (it == loads_.end() || it->second != load) continue;  // the request ended meanwhile
    load->arrived = static_cast<int>(load->blocks.size());
    load->ready = true;
    out.loads.push_back({load->id, load->arrived * bt, {}, {}});
  }
  return out;
}

bool PoolConnector::finished(engine::RequestId id, engine::KvEnd) {
  auto it = loads_.find(id);
  if (it != loads_.end()) {
    it->second->cancelled = true;
    loads_.erase(it);
  }
  return false;  // its blocks are written on the engine thread only, within wait_layer_load
}

Status PoolConnector::start_load(std::span<const engine::RequestId> ids) {
  loading_now_.clear();
  for (engine::RequestId id : ids) {
    auto it = loads_.find(id);
    if (it == loads_.end() || !it->second->ready)
      return internal_error(fmt::format("KV pool connector: request {} has no load ready", id));
    loading_now_.push_back(it->second);
  }
  // A hybrid model's state after the last block, before the step's first (linear) layer runs.
  for (const auto& load : loading_now_) {
    if (!hybrid() || load->arrived == 0) continue;
    if (load->state == nullptr)
      return internal_error(fmt::format("KV pool connector: request {}'s last block has no state", load->id));
    TS_RETURN_IF_ERROR(io_->write_state(load->id, std::as_bytes(std::span(load->state->payload))));
  }
  return ok_status();
}

Status PoolConnector::wait_layer_load(int layer) {
  if (loading_now_.empty()) return ok_status();
  const auto t0 = Clock::now();
  for (const auto& load : loading_now_) {
    const auto n = static_cast<size_t>(load->arrived);
    if (n == 0) continue;
    std::vector<const uint8_t*> payloads(n);
    for (size_t j = 0; j < n; ++j) payloads[j] = load->blocks[j]->payload.data();
    TS_RETURN_IF_ERROR(write_block_layer(*io_, format_, layer, std::span(load->device).first(n), payloads, rows_)
                           .with_context("loading KV blocks from the cluster pool"));
  }
  counters_.load_seconds += since(t0);
  if (layer + 1 < format_.geometry.n_layers) return ok_status();
  const int bt = format_.geometry.block_tokens;
  for (const auto& load : loading_now_) {
    counters_.hit_tokens += static_cast<uint64_t>(load->arrived) * bt;
    loads_.erase(load->id);
  }
  loading_now_.clear();
  return ok_status();
}

engine::KvConnectorStats PoolConnector::stats() const {
  engine::KvConnectorStats s;
  s.connector = std::string(kPoolConnector);
  engine::KvTierStats t;
  t.tier = "pool";
  t.prefix_cache = true;
  t.shared = true;
  t.hit_tokens = counters_.hit_tokens;
  t.load_bytes = counters_.load_bytes;
  t.save_bytes = counters_.save_bytes;
  t.load_seconds = counters_.load_seconds;
  t.save_seconds = counters_.save_seconds;
  t.blocks = counters_.used_slots;
  t.bytes = counters_.used_slots * slot_bytes_ + counters_.used_state_slots * state_slot_bytes_;
  t.capacity_bytes = (slots_ ? static_cast<uint64_t>(slots_->slots()) * slot_bytes_ : 0) +
                     (state_slots_ ? static_cast<uint64_t>(state_slots_->slots()) * state_slot_bytes_ : 0);
  t.evicted_blocks = counters_.evicted + counters_.dropped;
  t.failed_blocks = counters_.failed;
  t.peer_blocks = index_ ? index_->peer_blocks() : 0;
  s.tiers.push_back(t);
  return s;
}

Result<std::shared_ptr<engine::KvConnector>> make_pool_connector(const ConnectorSpec& spec) {
  TS_ASSIGN_OR_RETURN(PoolOptions o, connector_options<PoolOptions>(spec, kPoolConnector));
  TS_ASSIGN_OR_RETURN(std::shared_ptr<PoolConnector> c, PoolConnector::create(std::move(o), spec.model_identity));
  return std::shared_ptr<engine::KvConnector>(std::move(c));
}

}  // namespace tessera::kv
