// The pd-link connector: set-up, the decode side (remote prefills as asynchronous loads) and its stats. The prefill
// side (saves) is pd_link_save.cc.
#include "kv/pd_link/pd_link.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <string_view>
#include <vector>

#include <fmt/core.h>

#include "base/log.h"
#include "link/checksum.h"

namespace tessera::kv {

using Clock = std::chrono::steady_clock;

// One decode-side load, shared by the connector (engine thread), the control plane's thread (RemotePrefill) and
// the queue of ended loads; its staging range goes back when the last of them lets go.
struct RemotePrefill::Shared {
  std::weak_ptr<PdLinkConnector> connector;
  engine::RequestId id = 0;
  std::vector<engine::TokenId> prompt;
  int export_from = 0;
  int window_from = 0;
  int choices = 1;
  api::KvLayout layout;
  std::shared_ptr<const PdLinkLoadParams> params;
  Status staged;
  std::optional<uint64_t> offset;
  std::shared_ptr<StagingAllocator> alloc;
  std::shared_ptr<link::Agent> agent;  // keeps the staging region mapped until the range goes back
  std::atomic<bool> abandoned{false};
  std::mutex mu;
  bool ended = false;                                                                             // GUARDED_BY(mu)
  Result<std::vector<engine::TokenId>> result = unavailable("the remote prefill has not ended");  // GUARDED_BY(mu)
  std::vector<engine::TokenLogprobs> first_logprobs;                                              // GUARDED_BY(mu)

  ~Shared() {
    if (offset) alloc->release(*offset);
  }
};

engine::RequestId RemotePrefill::id() const { return s_->id; }
const std::vector<engine::TokenId>& RemotePrefill::prompt() const { return s_->prompt; }
int RemotePrefill::export_from() const { return s_->export_from; }
int RemotePrefill::window_from() const { return s_->window_from; }
int RemotePrefill::choices() const { return s_->choices; }
size_t RemotePrefill::bytes() const { return s_->layout.bytes(); }
DType RemotePrefill::kv_dtype() const { return s_->layout.dtype; }
const PdLinkLoadParams& RemotePrefill::params() const { return *s_->params; }
Status RemotePrefill::staged() const { return s_->staged; }
const std::atomic<bool>& RemotePrefill::abandoned() const { return s_->abandoned; }

Result<RemotePrefill::Target> RemotePrefill::target() {
  TS_RETURN_IF_ERROR(s_->staged);
  auto c = s_->connector.lock();
  if (!c) return unavailable("the pd-link connector is gone");
  TS_ASSIGN_OR_RETURN(link::RegionDesc desc, c->agent_->describe(c->staging_));
  Target t;
  t.agent = c->agent_->info().encode();
  t.region = desc.encode();
  t.offset = *s_->offset;
  t.tag = (static_cast<uint64_t>(getpid()) << 40) ^ c->next_tag_++;
  return t;
}

Status RemotePrefill::receive(uint64_t tag, uint64_t checksum) {
  TS_RETURN_IF_ERROR(s_->staged);
  auto c = s_->connector.lock();
  if (!c) return unavailable("the pd-link connector is gone");
  if (!c->wait_tag(tag, std::chrono::milliseconds(c->options_.tag_grace_ms)))
    return deadline_exceeded("the KV completion tag never arrived");
  const auto t0 = Clock::now();
  const size_t total = s_->layout.bytes();
  const uint64_t sum = link::checksum64(c->staging_bytes_.data() + *s_->offset, total);
  std::lock_guard<std::mutex> lock(c->counters_mu_);
  c->counters_.verify_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  if (sum != checksum) {
    c->counters_.checksum_mismatches++;
    return data_loss("KV checksum mismatch");
  }
  c->counters_.kv_bytes += total;
  return ok_status();
}

void RemotePrefill::finish(Result<std::vector<engine::TokenId>> first_tokens,
                           std::vector<engine::TokenLogprobs> first_logprobs) {
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    if (s_->ended) return;
    s_->ended = true;
    s_->result = std::move(first_tokens);
    s_->first_logprobs = std::move(first_logprobs);
  }
  if (auto c = s_->connector.lock()) c->load_ended(s_);
}

Result<std::shared_ptr<PdLinkConnector>> PdLinkConnector::create(PdLinkOptions options) {
  std::shared_ptr<PdLinkConnector> c(new PdLinkConnector(std::move(options)));
  const PdLinkOptions& o = c->options_;
  link::AgentOptions ao;
  ao.name = o.agent_name.empty() ? fmt::format("pd-{}-{}", getpid(), std::random_device{}() % 100000) : o.agent_name;
  ao.endpoints = o.endpoints;
  ao.host = o.host;
  ao.link.cluster_token = o.cluster_token;
  TS_ASSIGN_OR_RETURN(c->agent_, link::Agent::create(ao));
  if (o.decode) {
    if (const char* z = std::getenv("TESSERA_PD_ZERO_STATE"); z != nullptr && std::string_view(z) == "1") {
      c->zero_state_ = true;
      log::warn(
          "pd-link: TESSERA_PD_ZERO_STATE=1: a hybrid model's recurrent state is loaded as zeros (a test's "
          "fault; its text will be wrong)");
    }
    TS_ASSIGN_OR_RETURN(c->staging_, c->agent_->allocate_region(o.staging_bytes));
    TS_ASSIGN_OR_RETURN(c->staging_bytes_, c->agent_->host_bytes(c->staging_));
    c->staging_alloc_ = std::make_shared<StagingAllocator>(o.staging_bytes);
    PdLinkConnector* raw = c.get();
    c->notifier_ = std::thread([raw] { raw->notifications(); });
  }
  return c;
}

PdLinkConnector::~PdLinkConnector() { shutdown(); }

void PdLinkConnector::shutdown() {
  std::call_once(shut_, [this] {
    stopping_ = true;
    {
      std::lock_guard<std::mutex> lock(tags_mu_);
      tags_cv_.notify_all();
    }
    if (agent_) agent_->shutdown(std::chrono::milliseconds(1000));
    if (notifier_.joinable()) notifier_.join();
  });
}

void PdLinkConnector::notifications() {
  while (!stopping_) {
    auto n = agent_->next_notification(std::chrono::milliseconds(100));
    if (!n.ok()) continue;
    std::lock_guard<std::mutex> lock(tags_mu_);
    arrived_.insert(n->tag);
    tags_cv_.notify_all();
  }
}

bool PdLinkConnector::wait_tag(uint64_t tag, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(tags_mu_);
  const bool ok =
      tags_cv_.wait_for(lock, timeout, [&] { return arrived_.count(tag) > 0 || stopping_; }) && arrived_.count(tag) > 0;
  arrived_.erase(tag);
  return ok;
}

api::KvLayout PdLinkConnector::layout(int export_from, int positions, DType dtype, int window_from) const {
  const engine::KvGeometry& g = io_->geometry();
  api::KvLayout l{g.n_layers, g.kv_dim, dtype, positions, g.state_bytes, g.sliding, -1, g.widths};
  if (window_from > export_from) l.window_positions = std::max(0, export_from + positions - window_from);
  return l;
}

DType PdLinkConnector::wire_dtype() const {
  const engine::KvGeometry& g = io_->geometry();
  return api::kv_wire_dtype(g.dtype) && g.whole_blocks(g.dtype) ? g.dtype : DType::kF32;
}

PdLinkCounters PdLinkConnector::counters() const {
  std::lock_guard<std::mutex> lock(counters_mu_);
  return counters_;
}

Status PdLinkConnector::attach(engine::KvBlockIo& io, std::function<void()> wake) {
  io_ = &io;
  wake_ = std::move(wake);
  return ok_status();
}

engine::KvMatch PdLinkConnector::match(const engine::KvRequestView& request, int supplied) {
  if (auto save = request.params_for<PdLinkSaveParams>(kPdLink)) {
    saves_[request.id] = save->job;  // prefill side: nothing to load, its layers to save
    return {};
  }
  auto params = request.params_for<PdLinkLoadParams>(kPdLink);
  const int n = static_cast<int>(request.tokens.size());
  // Only a fresh prompt goes to a prefill node (one preempted after decoding recomputes here).
  if (!params || control_ == nullptr || !staging_alloc_ || request.generated() > 0 || supplied >= n) return {};
  if (!control_->disaggregate(request, *params, supplied)) return {};
  // Asked again: the engine could not allocate the blocks last time, and the request waited for them.
  if (!matched_.insert(request.id).second && waited_.insert(request.id).second) {
    std::lock_guard<std::mutex> lock(counters_mu_);
    counters_.waited_for_blocks++;
  }
  return {.tokens = n - supplied, .async = true, .cached = false, .first_tokens = true};
}

void PdLinkConnector::allocated(const engine::KvRequestView& request, std::span<const engine::BlockId> blocks,
                                int first, int count) {
  auto params = request.params_for<PdLinkLoadParams>(kPdLink);
  if (!params) return;
  matched_.erase(request.id);
  waited_.erase(request.id);
  if (count == 0) {
    if (request.generated() == 0 && counted_local_.insert(request.id).second) {
      std::lock_guard<std::mutex> lock(counters_mu_);
      counters_.local++;
    }
    return;
  }
  auto s = std::make_shared<RemotePrefill::Shared>();
  s->connector = weak_from_this();
  s->id = request.id;
  s->prompt.assign(request.tokens.begin(), request.tokens.end());
  s->export_from = first;
  // A cache that keeps only its windows holds the sliding layers' rows from the window block of the prompt's end on
  // (the scheduler reserved no others): the rest need not cross.
  s->window_from = std::max(first, io_->geometry().first_window_row(first + count));
  s->choices = request.choices;
  s->layout = layout(first, count, wire_dtype(), s->window_from);
  s->params = params;
  s->alloc = staging_alloc_;
  s->agent = agent_;
  s->offset = staging_alloc_->allocate(s->layout.bytes());
  if (!s->offset) s->staged = resource_exhausted(fmt::format("no staging memory for {} KV bytes", s->layout.bytes()));
  loads_[request.id] = s;
  control_->start(std::make_shared<RemotePrefill>(s));
}

void PdLinkConnector::load_ended(const std::shared_ptr<RemotePrefill::Shared>& s) {
  {
    std::lock_guard<std::mutex> lock(done_mu_);
    done_.push_back(s);
  }
  if (wake_) wake_();
}

engine::KvPoll PdLinkConnector::poll() {
  std::vector<std::shared_ptr<RemotePrefill::Shared>> done;
  {
    std::lock_guard<std::mutex> lock(done_mu_);
    done.swap(done_);
  }
  engine::KvPoll out;
  for (const auto& s : done) {
    auto it = loads_.find(s->id);
    if (it == loads_.end() || it->second != s) continue;  // the request ended meanwhile
    std::lock_guard<std::mutex> lock(s->mu);
    if (s->result.ok()) {
      out.loads.push_back({s->id, s->layout.positions, *s->result, s->first_logprobs});
    } else {
      out.loads.push_back({s->id, 0, {}});
      loads_.erase(it);  // the staging range goes back with the last reference
    }
  }
  return out;
}

bool PdLinkConnector::finished(engine::RequestId id, engine::KvEnd end) {
  if (auto it = loads_.find(id); it != loads_.end()) {
    it->second->abandoned = true;  // the control plane gives up its call
    loads_.erase(it);
  }
  saves_.erase(id);
  matched_.erase(id);
  waited_.erase(id);
  if (end != engine::KvEnd::kPreempted) counted_local_.erase(id);
  return false;  // the link writes into staging, never into the cache's blocks
}

Status PdLinkConnector::start_load(std::span<const engine::RequestId> ids) {
  loading_now_.clear();
  for (engine::RequestId id : ids) {
    auto it = loads_.find(id);
    if (it != loads_.end()) loading_now_.push_back(it->second);
  }
  return ok_status();
}

Status PdLinkConnector::wait_layer_load(int layer) {
  if (loading_now_.empty()) return ok_status();
  const auto t0 = Clock::now();
  const int last = io_->geometry().n_layers - 1;
  for (const auto& s : loading_now_) {
    const uint8_t* data = reinterpret_cast<const uint8_t*>(staging_bytes_.data()) + *s->offset;
    const api::KvLayout& l = s->layout;
    // Straight from the staging range into the cache: one device copy per run of blocks, in the cache's own type
    // (wire_dtype(): nothing to convert); a sliding layer's rows from window_from on.
    const int skip = l.first_carried(layer);
    if (l.carried(layer) > 0) {
      TS_RETURN_IF_ERROR(io_->write_rows(s->id, layer, s->export_from + skip, l.carried(layer), l.dtype,
                                         data + l.k_offset(layer, skip), data + l.v_offset(layer, skip))
                             .with_context("loading the prefill node's KV"));
    }
    if (layer == last) {
      const auto* state = reinterpret_cast<const std::byte*>(data + l.state_offset());
      if (zero_state_ && l.state_bytes() > 0) {
        log::warn("pd-link: request {}: loading zeros for its {}-byte recurrent state (TESSERA_PD_ZERO_STATE)", s->id,
                  l.state_bytes());
        const std::vector<std::byte> zeros(l.state_bytes());
        TS_RETURN_IF_ERROR(io_->write_state(s->id, zeros));
      } else {
        TS_RETURN_IF_ERROR(io_->write_state(s->id, {state, l.state_bytes()}));
      }
    }
  }
  std::lock_guard<std::mutex> lock(counters_mu_);
  counters_.verify_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  if (layer == last) {
    for (const auto& s : loading_now_) {
      counters_.remote_tokens += static_cast<uint64_t>(s->layout.positions);
      loads_.erase(s->id);  // loaded: the staging range goes back now
    }
    loading_now_.clear();
  }
  return ok_status();
}

engine::KvConnectorStats PdLinkConnector::stats() const {
  const PdLinkCounters c = counters();
  engine::KvTierStats t;
  t.tier = "remote";
  t.prefix_cache = false;
  t.hit_tokens = c.remote_tokens;
  t.load_bytes = c.kv_bytes;
  t.load_seconds = c.verify_seconds;
  t.save_bytes = c.saved_bytes;
  t.save_seconds = c.save_seconds;
  return {std::string(kPdLink), {t}};
}

Result<std::shared_ptr<engine::KvConnector>> make_pd_link_connector(const ConnectorSpec& spec) {
  TS_ASSIGN_OR_RETURN(PdLinkOptions o, connector_options<PdLinkOptions>(spec, kPdLink));
  TS_ASSIGN_OR_RETURN(std::shared_ptr<PdLinkConnector> c, PdLinkConnector::create(std::move(o)));
  return std::shared_ptr<engine::KvConnector>(std::move(c));
}

}  // namespace tessera::kv
