// The pd-link connector's prefill side: each layer of a prompt chunk copied into link-registered memory right
// after it is computed, its link write started at once (or deferred to the prompt's end without overlap), and the
// completion tag once every write landed.
#include <algorithm>

#include <fmt/core.h>

#include "kv/pd_link/pd_link.h"
#include "link/checksum.h"

namespace tessera::kv {

using Clock = std::chrono::steady_clock;

SaveJob::~SaveJob() {
  if (registered_) (void)agent_->unregister_region(local_id_);
}

Result<SaveJob::Done> SaveJob::complete(Clock::time_point computed) {
  if (exported_ < prompt_len_) {
    return internal_error(fmt::format("the prefill exported positions [{}, {}) of [{}, {})", export_from_,
                                      std::max(export_from_, exported_), export_from_, prompt_len_));
  }
  Done d;
  d.overlap = deferred_.empty();
  if (!deferred_.empty()) first_write_ = Clock::now();
  for (auto& batch : deferred_) futures_.push_back(agent_->write(peer_, std::move(batch)));
  deferred_.clear();
  Status st;
  for (auto& f : futures_) {
    st = f.wait();
    if (!st.ok()) break;
  }
  if (st.ok()) st = agent_->write_with_imm(peer_, {{local_id_, 0, remote_, remote_offset_, 0}}, tag_).wait();
  const auto done = Clock::now();
  d.checksum = link::checksum64(local_.data(), local_.size());
  d.bytes = local_.size();
  (void)agent_->unregister_region(local_id_);
  registered_ = false;
  TS_RETURN_IF_ERROR(st);
  auto ms = [](Clock::duration x) { return std::chrono::duration<double, std::milli>(x).count(); };
  d.transfer_wait_ms = ms(done - computed);
  d.transfer_ms = ms(done - first_write_.value_or(computed));
  return d;
}

Result<std::shared_ptr<SaveJob>> PdLinkConnector::prepare_save(const link::AgentInfo& peer,
                                                               const link::RegionDesc& region, uint64_t offset,
                                                               uint64_t tag, int export_from, int prompt_len,
                                                               DType dtype, int window_from) {
  if (!api::kv_wire_dtype(dtype) || !io_->geometry().whole_blocks(dtype)) {
    return invalid_argument(
        fmt::format("this model's KV rows are not sent in {} (f32, f16, bf16, q8_0, q4_0; a block type's rows must "
                    "be whole blocks)",
                    dtype_name(dtype)));
  }
  std::shared_ptr<Peer> p;
  {
    std::lock_guard<std::mutex> lock(peers_mu_);
    auto& slot = peers_[peer.name];
    if (!slot) slot = std::make_shared<Peer>();
    p = slot;
  }
  {
    // Under this peer's own lock only: a peer whose address accepts and never answers stalls only its calls.
    std::lock_guard<std::mutex> lock(p->mu);
    if (!p->connected) {
      TS_RETURN_IF_ERROR(agent_->connect(peer));
      p->connected = true;
    }
  }
  const int count = prompt_len - export_from;
  if (export_from < 0 || count < 1) return invalid_argument("export_from must leave at least one token");
  if (window_from > prompt_len) return invalid_argument("window_from is past the prompt's end");
  const api::KvLayout l = layout(export_from, count, dtype, window_from);
  const size_t total = l.bytes();
  if (total > region.length || offset > region.length - total) {
    return invalid_argument(fmt::format("the reserved region holds {} bytes; {} are needed", region.length, total));
  }
  std::shared_ptr<SaveJob> job(new SaveJob());
  job->agent_ = agent_;
  job->peer_ = peer.name;
  job->remote_ = region.id;
  job->remote_offset_ = offset;
  job->tag_ = tag;
  job->export_from_ = export_from;
  job->prompt_len_ = prompt_len;
  job->layout_ = l;
  job->overlap_ = options_.overlap;
  job->local_.resize(total);
  TS_ASSIGN_OR_RETURN(job->local_id_, agent_->register_region(job->local_.data(), total));
  job->registered_ = true;
  return job;
}

void PdLinkConnector::forget_peer(const std::string& peer) {
  std::lock_guard<std::mutex> lock(peers_mu_);
  peers_.erase(peer);
}

bool PdLinkConnector::start_save(std::span<const engine::KvStepChunk> chunks) {
  saving_now_.clear();
  for (const engine::KvStepChunk& c : chunks) {
    auto it = saves_.find(c.id);
    if (it == saves_.end() || c.from >= c.prompt_len) continue;
    SaveJob& job = *it->second;
    // From where the last save stopped (or export_from): this covers what the node's own caches supplied.
    const int first = std::max(job.export_from_, job.exported_);
    const int end = std::min(c.to, job.prompt_len_);
    if (end <= first) continue;
    saving_now_.push_back({it->second, first, end, c.id});
  }
  return !saving_now_.empty();
}

Status PdLinkConnector::save_layer(int layer) {
  const auto t0 = Clock::now();
  const int last = io_->geometry().n_layers - 1;
  size_t bytes = 0;
  for (StepSave& s : saving_now_) {
    SaveJob& job = *s.job;
    const api::KvLayout& l = job.layout_;
    // The chunk's rows this layer carries (a sliding layer's from the decode node's window_from on).
    const int first = std::max(s.first, job.export_from_ + l.first_carried(layer));
    std::vector<link::Assignment> batch;
    if (first < s.end) {
      const size_t k_off = l.k_offset(layer, first - job.export_from_);
      const size_t v_off = l.v_offset(layer, first - job.export_from_);
      const uint64_t len = static_cast<uint64_t>(s.end - first) * l.row_bytes(layer);
      // The rows leave the paged cache now in both modes (its blocks may be reused once the request ends); only
      // the link writes wait when the overlap is off.
      TS_RETURN_IF_ERROR(io_->read_rows(s.id, layer, first, s.end - first, l.dtype, job.local_.data() + k_off,
                                        job.local_.data() + v_off));
      batch = {{job.local_id_, k_off, job.remote_, job.remote_offset_ + k_off, len},
               {job.local_id_, v_off, job.remote_, job.remote_offset_ + v_off, len}};
      bytes += 2 * len;
    }
    if (layer == last && s.end == job.prompt_len_ && l.state_bytes() > 0) {
      // The recurrent state after the prompt's last position travels with the last layer (api/kv_layout.h).
      auto* state = reinterpret_cast<std::byte*>(job.local_.data() + l.state_offset());
      TS_RETURN_IF_ERROR(io_->read_state(s.id, {state, l.state_bytes()}));
      batch.push_back(
          {job.local_id_, l.state_offset(), job.remote_, job.remote_offset_ + l.state_offset(), l.state_bytes()});
    }
    if (batch.empty()) continue;
    if (!job.overlap_) {
      job.deferred_.push_back(std::move(batch));
      continue;
    }
    if (!job.first_write_) job.first_write_ = Clock::now();
    job.futures_.push_back(agent_->write(job.peer_, std::move(batch)));
  }
  std::lock_guard<std::mutex> lock(counters_mu_);
  counters_.saved_bytes += bytes;
  counters_.save_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  return ok_status();
}

Status PdLinkConnector::wait_save() {
  for (StepSave& s : saving_now_) s.job->exported_ = s.end;
  saving_now_.clear();
  return ok_status();
}

}  // namespace tessera::kv
