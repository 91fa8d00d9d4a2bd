// KV connectors for tests of the engine's connector contract (engine/kv_connector.h): one saves every computed
// prompt position of a request into a buffer in the canonical layout (api/kv_layout.h), the other supplies
// positions from such a buffer, synchronously or when the test says so, optionally with the first tokens (as a
// prefill node's KV arrives), fewer than promised, or keeping the request's blocks after it ends.
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "api/kv_layout.h"
#include "engine/kv_connector.h"

namespace tessera::engine::testing {

inline api::KvLayout canonical(const KvGeometry& g, int positions, DType dtype) {
  return {g.n_layers, g.kv_dim, dtype, positions, g.state_bytes, {}, -1, g.widths};
}

// What SavingConnector writes: the prompt's KV, positions [0, prompt_len), in `dtype`.
struct SaveParams final : KvTransferParams {
  std::string_view connector() const override { return "test-save"; }
  std::shared_ptr<std::vector<uint8_t>> out;
  DType dtype = DType::kF32;
};

class SavingConnector final : public KvConnector {
 public:
  std::string_view name() const override { return "test-save"; }
  bool works_with_windows() const override { return true; }  // it reads rows of running requests only
  Status attach(KvBlockIo& io, std::function<void()>) override {
    io_ = &io;
    return ok_status();
  }
  KvMatch match(const KvRequestView& r, int) override {
    if (auto p = r.params_for<SaveParams>("test-save")) {
      jobs_[r.id] = {p, 0, r.prompt_len};
      p->out->resize(canonical(io_->geometry(), r.prompt_len, p->dtype).bytes());
    }
    return {};
  }
  bool start_save(std::span<const KvStepChunk> chunks) override {
    now_.clear();
    for (const KvStepChunk& c : chunks) {
      auto it = jobs_.find(c.id);
      if (it == jobs_.end() || c.from >= c.prompt_len) continue;
      const int end = std::min(c.to, c.prompt_len);
      if (end > it->second.exported) now_.push_back({c.id, it->second.exported, end});
    }
    return !now_.empty();
  }
  Status save_layer(int layer) override {
    for (const Step& s : now_) {
      const Job& j = jobs_.at(s.id);
      const api::KvLayout full = canonical(io_->geometry(), j.prompt_len, j.params->dtype);
      uint8_t* base = j.params->out->data();
      TS_RETURN_IF_ERROR(io_->read_rows(s.id, layer, s.first, s.end - s.first, j.params->dtype,
                                        base + full.k_offset(layer, s.first), base + full.v_offset(layer, s.first)));
      layers_saved++;
    }
    return ok_status();
  }
  Status wait_save() override {
    for (const Step& s : now_) jobs_.at(s.id).exported = s.end;
    now_.clear();
    return ok_status();
  }
  bool finished(RequestId id, KvEnd end) override {
    if (end != KvEnd::kPreempted) jobs_.erase(id);
    return false;
  }
  KvConnectorStats stats() const override { return {"test-save", {}}; }

  int layers_saved = 0;  // engine thread; read once the request is over

 private:
  struct Job {
    std::shared_ptr<const SaveParams> params;
    int exported = 0;
    int prompt_len = 0;
  };
  struct Step {
    RequestId id;
    int first, end;
  };
  KvBlockIo* io_ = nullptr;
  std::map<RequestId, Job> jobs_;
  std::vector<Step> now_;
};

// What LoadingConnector supplies: positions of a prompt from a canonical buffer covering [0, prompt_len).
struct LoadParams final : KvTransferParams {
  std::string_view connector() const override { return "test-load"; }
  std::shared_ptr<const std::vector<uint8_t>> kv;
  DType dtype = DType::kF32;
  int prompt_len = 0;
  std::vector<TokenId> first_tokens;  // set: the whole prompt and its first tokens (async only)
  int deliver = -1;                   // positions that arrive of those promised (-1: all)
  bool fail = false;                  // writing them into the cache fails (a transfer found corrupt)
};

class LoadingConnector final : public KvConnector {
 public:
  struct Options {
    bool async = true;
    bool auto_complete = false;  // async loads end at once (else when complete_all() is called)
    bool hold_blocks = false;    // finished() keeps the blocks until release_held()
  };
  explicit LoadingConnector(Options o) : o_(o) {}

  std::string_view name() const override { return "test-load"; }
  bool works_with_windows() const override { return true; }  // it writes rows of running requests only
  Status attach(KvBlockIo& io, std::function<void()> wake) override {
    io_ = &io;
    wake_ = std::move(wake);
    return ok_status();
  }
  KvMatch match(const KvRequestView& r, int supplied) override {
    auto p = r.params_for<LoadParams>("test-load");
    if (!p) return {};
    std::lock_guard<std::mutex> lock(mu_);
    matches++;
    if (!p->first_tokens.empty() && o_.async && r.generated() == 0)
      return {.tokens = p->prompt_len - supplied, .async = true, .cached = false, .first_tokens = true};
    const int end = std::min(p->prompt_len, static_cast<int>(r.tokens.size()) - 1);
    return {.tokens = std::max(0, end - supplied), .async = o_.async};
  }
  void allocated(const KvRequestView& r, std::span<const BlockId> blocks, int first, int count) override {
    if (count == 0) return;
    auto p = r.params_for<LoadParams>("test-load");
    std::lock_guard<std::mutex> lock(mu_);
    Load& l = loads_[r.id];
    l = {p, {blocks.begin(), blocks.end()}, first, count, !o_.async, 0};
    l.arrived = p->deliver < 0 ? count : std::min(count, p->deliver);
    if (o_.async && o_.auto_complete) ready_.push_back(r.id);
    allocations++;
  }
  KvPoll poll() override {
    std::lock_guard<std::mutex> lock(mu_);
    KvPoll out;
    for (RequestId id : ready_) {
      auto it = loads_.find(id);
      if (it == loads_.end() || it->second.done) continue;
      it->second.done = true;
      out.loads.push_back({id, it->second.arrived, it->second.params->first_tokens});
    }
    ready_.clear();
    out.released.swap(released_);
    return out;
  }
  bool finished(RequestId id, KvEnd end) override {
    std::lock_guard<std::mutex> lock(mu_);
    ends.emplace_back(id, end);
    loads_.erase(id);
    if (end != KvEnd::kPreempted && o_.hold_blocks) {
      held_.insert(id);
      return true;
    }
    return false;
  }
  void evicted(std::span<const EvictedBlock> blocks) override {
    std::lock_guard<std::mutex> lock(mu_);
    evictions.insert(evictions.end(), blocks.begin(), blocks.end());
  }
  Status start_load(std::span<const RequestId> ids) override {
    std::lock_guard<std::mutex> lock(mu_);
    now_.assign(ids.begin(), ids.end());
    return ok_status();
  }
  Status wait_layer_load(int layer) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (RequestId id : now_) {
      const Load& l = loads_.at(id);
      if (l.params->fail) return data_loss("test-load: the loaded KV failed its check");
      const api::KvLayout full = canonical(io_->geometry(), l.params->prompt_len, l.params->dtype);
      const uint8_t* base = l.params->kv->data();
      TS_RETURN_IF_ERROR(io_->write_rows(id, layer, l.first, l.arrived, l.params->dtype,
                                         base + full.k_offset(layer, l.first), base + full.v_offset(layer, l.first)));
      layers_loaded++;
    }
    return ok_status();
  }
  KvConnectorStats stats() const override { return {"test-load", {}}; }

  // Test thread: the pending async loads end now; the held blocks may go.
  void complete_all() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [id, l] : loads_)
        if (!l.done) ready_.push_back(id);
    }
    wake_();
  }
  void release_held() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      released_.assign(held_.begin(), held_.end());
      held_.clear();
    }
    wake_();
  }
  std::vector<std::pair<RequestId, KvEnd>> ends_seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return ends;
  }
  std::vector<EvictedBlock> evictions_seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return evictions;
  }

  int matches = 0, allocations = 0, layers_loaded = 0;
  std::vector<std::pair<RequestId, KvEnd>> ends;
  std::vector<EvictedBlock> evictions;

 private:
  struct Load {
    std::shared_ptr<const LoadParams> params;
    std::vector<BlockId> blocks;
    int first = 0, count = 0;
    bool done = false;
    int arrived = 0;
  };
  Options o_;
  KvBlockIo* io_ = nullptr;
  std::function<void()> wake_;
  std::mutex mu_;
  std::map<RequestId, Load> loads_;
  std::vector<RequestId> ready_, now_, released_;
  std::set<RequestId> held_;
};

}  // namespace tessera::engine::testing
