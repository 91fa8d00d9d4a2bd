// The pd-link connector: prefill -> decode over the link (docs/pd-protocol.md), as an engine::KvConnector. It is
// the data plane of disaggregation; the control plane (serve::PdService: when to disaggregate, which prefill node,
// the HTTP calls, the breaker, fallback accounting) drives it through PdLinkControl and the two per-request params.
//
//   decode side   A request carrying PdLinkLoadParams is matched with the positions its node lacks when the
//                 control plane's policy says so (PdLinkControl::disaggregate): an asynchronous load that brings
//                 the first sampled token of every choice. Once the engine has allocated the request's blocks, the
//                 connector reserves a range of its staging region (link memory) and hands a RemotePrefill to
//                 the control plane, which calls prefill nodes in turn; each answer is checked here (the completion
//                 tag, then the checksum of the staging bytes). The engine then copies the KV from the staging
//                 range into its cache layer by layer (one device copy per run of blocks per layer; the rows
//                 cross the link in its cache's own type, api::kv_wire_dtype, so an f16 cache's take half the
//                 bytes of f32 and land without conversion) and gives the range back. A failed or abandoned load ends
//                 with 0 positions: the engine computes the prompt itself.
//   prefill side  A request carrying PdLinkSaveParams (a SaveJob from prepare_save()) has each layer of every
//                 prompt chunk copied, right after the layer is computed, into link-registered memory in the
//                 canonical layout (api/kv_layout.h, version 3: a windowed decode node's sliding layers get only
//                 the rows their windows will read) and the type the decode node asked for, and that
//                 layer's link write starts at once (overlap; without it the writes wait for the prompt's end).
//                 Positions the node found in its own caches go with the first computed chunk. SaveJob::complete() then
//                 finishes the writes and sends the completion tag.
//
// Threads: one notification reader (decode side). Thread-safety: the KvConnector methods run on the engine thread;
// everything else here may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "api/kv_layout.h"
#include "base/cluster_token.h"
#include "engine/kv_connector.h"
#include "kv/pd_link/staging.h"
#include "kv/registry.h"
#include "link/agent.h"

namespace tessera::kv {

inline constexpr std::string_view kPdLink = "pd-link";

struct PdLinkOptions {
  // Staging memory and a notification reader: a decode node (or any node that may become one).
  bool decode = false;
  size_t staging_bytes = 64u << 20;
  // prefill: write each layer as soon as it is computed; false defers every write to the prompt's end (the
  // baseline that shows what the overlap hides).
  bool overlap = true;
  std::vector<std::string> endpoints = {"shm", "tcp"};
  std::string host = "127.0.0.1";  // where the tcp endpoint listens
  std::string agent_name;          // default: derived from the process id
  ClusterToken cluster_token;      // proven at link connection set-up
  // How long a completion tag may trail the prefill node's 200 (it answers only after its tagged write completed).
  int tag_grace_ms = 2000;
};

// Decode side: attached to a request that may be prefilled on another node. The control plane derives its own type
// from this one, carrying what it needs for the call (sampling, the router's choice, the client's cancel flag).
class PdLinkLoadParams : public engine::KvTransferParams {
 public:
  std::string_view connector() const override { return kPdLink; }
};

class PdLinkConnector;

// One remote prefill of the decode side, from the moment the request's blocks are allocated to its end. Handed to
// the control plane (PdLinkControl::start); every method is thread-safe.
class RemotePrefill {
 public:
  struct Target {
    std::string agent;   // link::AgentInfo::encode() of this node
    std::string region;  // link::RegionDesc::encode() of its staging region
    uint64_t offset = 0;
    uint64_t tag = 0;  // fresh for each call
  };
  struct Shared;  // the connector's side
  explicit RemotePrefill(std::shared_ptr<Shared> shared) : s_(std::move(shared)) {}

  engine::RequestId id() const;
  const std::vector<engine::TokenId>& prompt() const;
  int export_from() const;  // positions this node has already (the prefill node sends the rest)
  // The first position whose sliding-window layers' rows this node keeps (export_from() when its cache keeps every
  // position): those layers' rows before it are not sent (api::KvLayout version 3).
  int window_from() const;
  int choices() const;
  size_t bytes() const;    // the KV bytes expected (api::KvLayout of the missing positions)
  DType kv_dtype() const;  // the wire type they are asked for in (PdLinkConnector::wire_dtype)
  // What the control plane attached to the request (its own PdLinkLoadParams subtype).
  const PdLinkLoadParams& params() const;
  // OK, or why there is nowhere to receive the KV (no staging memory free now): then finish() with an error.
  Status staged() const;
  // The link half of a prefill call, with a fresh completion tag.
  Result<Target> target();
  // Set once the engine no longer wants this load (its request ended): give up the call (http::fetch's cancel).
  const std::atomic<bool>& abandoned() const;
  // After a prefill node answered 200 to the call for `tag`: waits (at most the tag grace) for the completion tag,
  // then compares the checksum of the staging bytes with the node's. DeadlineExceeded when the tag never came,
  // DataLoss on a mismatch (counted): the control plane tries another node.
  Status receive(uint64_t tag, uint64_t checksum);
  // The end, exactly once: the first token of each choice (the engine loads the KV and decodes on), with their
  // logprobs when the request asked for them, or an error (the engine computes the prompt itself).
  void finish(Result<std::vector<engine::TokenId>> first_tokens,
              std::vector<engine::TokenLogprobs> first_logprobs = {});

 private:
  std::shared_ptr<Shared> s_;
};

// The control plane (serve::PdService).
class PdLinkControl {
 public:
  virtual ~PdLinkControl() = default;
  // Engine thread, must not block: whether to prefill `request` on another node, `supplied` positions being here
  // already (device and host caches).
  virtual bool disaggregate(const engine::KvRequestView& request, const PdLinkLoadParams& params, int supplied) = 0;
  // Engine thread: starts the remote prefill on a thread of the control plane; it ends with job->finish().
  virtual void start(std::shared_ptr<RemotePrefill> job) = 0;
};

// Prefill side: one request's KV on its way to a decode node.
class SaveJob {
 public:
  struct Done {
    uint64_t checksum = 0;  // link checksum64 of every byte sent
    size_t bytes = 0;
    bool overlap = true;
    double transfer_wait_ms = 0;  // `computed` to every write and the tag completed
    double transfer_ms = 0;       // first write issued to last completed
  };
  ~SaveJob();
  // After the request's last output (any thread): issues the writes the overlap did not, waits for all, sends the
  // completion tag. An error means the transfer failed (the caller answers 502 and forgets the connection).
  Result<Done> complete(std::chrono::steady_clock::time_point computed);
  const std::string& peer() const { return peer_; }
  DType kv_dtype() const { return layout_.dtype; }  // the wire type the rows are sent in

 private:
  friend class PdLinkConnector;
  SaveJob() = default;
  std::shared_ptr<link::Agent> agent_;
  std::string peer_;
  link::RegionId remote_{};
  uint64_t remote_offset_ = 0;
  uint64_t tag_ = 0;
  int export_from_ = 0;
  int prompt_len_ = 0;
  api::KvLayout layout_;
  bool overlap_ = true;
  // Engine thread while the request runs; the completion thread after its last output.
  std::vector<uint8_t> local_;
  link::RegionId local_id_{};
  bool registered_ = false;
  int exported_ = -1;  // positions [export_from, exported) are in local_
  std::vector<link::TransferFuture> futures_;
  std::vector<std::vector<link::Assignment>> deferred_;
  std::optional<std::chrono::steady_clock::time_point> first_write_;
};

class PdLinkSaveParams : public engine::KvTransferParams {
 public:
  explicit PdLinkSaveParams(std::shared_ptr<SaveJob> job) : job(std::move(job)) {}
  std::string_view connector() const override { return kPdLink; }
  std::shared_ptr<SaveJob> job;
};

// Data-plane counters (cumulative), beside the stats() the engine reports.
struct PdLinkCounters {
  uint64_t local = 0;                // requests with PdLinkLoadParams the policy kept here
  uint64_t waited_for_blocks = 0;    // remote prefills that waited for KV blocks before their call could start
  uint64_t remote_tokens = 0;        // positions loaded from prefill nodes
  uint64_t kv_bytes = 0;             // KV bytes received and verified
  uint64_t checksum_mismatches = 0;  // transfers refused by their checksum
  double verify_seconds = 0;         // checksumming the staging bytes and copying them into the cache
  uint64_t saved_bytes = 0;          // prefill side: KV bytes exported
  double save_seconds = 0;
};

class PdLinkConnector final : public engine::KvConnector, public std::enable_shared_from_this<PdLinkConnector> {
 public:
  static Result<std::shared_ptr<PdLinkConnector>> create(PdLinkOptions options);
  ~PdLinkConnector() override;

  // Before the engine starts (not owned; must outlive the engine's use of this connector).
  void set_control(PdLinkControl* control) { control_ = control; }
  const PdLinkOptions& options() const { return options_; }
  link::Agent& agent() { return *agent_; }
  // The canonical layout (api/kv_layout.h, version 3) of the `positions` positions from `export_from` on, in
  // `dtype`, with this model's sliding layers and state section: the sliding layers carry their rows from
  // `window_from` on.
  api::KvLayout layout(int export_from, int positions, DType dtype, int window_from) const;
  // Decode side, once attached: the type this node asks prefill nodes to send rows in, its cache's own
  // (api::kv_wire_dtype; f32 for a row that is not whole blocks of it, which no such cache has).
  DType wire_dtype() const;
  PdLinkCounters counters() const;

  // Prefill side. Connects to the decode node's agent once (a peer whose address never answers stalls only the
  // calls to it), then reserves link-registered memory for positions [export_from, prompt_len) and checks that
  // they fit the decode node's region at `offset`, the rows in `dtype` (api::kv_wire_dtype, in whole blocks), the
  // sliding layers' from `window_from` on (at most export_from: every row).
  Result<std::shared_ptr<SaveJob>> prepare_save(const link::AgentInfo& peer, const link::RegionDesc& region,
                                                uint64_t offset, uint64_t tag, int export_from, int prompt_len,
                                                DType dtype = DType::kF32, int window_from = 0);
  // The connection to `peer` failed: the next call reconnects.
  void forget_peer(const std::string& peer);
  // Stops the notification reader and the link (pending transfers fail); idempotent.
  void shutdown();

  // engine::KvConnector
  std::string_view name() const override { return kPdLink; }
  // It moves rows of running requests only: a windowed cache's sliding layers send and take their windows' rows.
  bool works_with_windows() const override { return true; }
  Status attach(engine::KvBlockIo& io, std::function<void()> wake) override;
  engine::KvMatch match(const engine::KvRequestView& request, int supplied) override;
  void allocated(const engine::KvRequestView& request, std::span<const engine::BlockId> blocks, int first,
                 int count) override;
  engine::KvPoll poll() override;
  bool finished(engine::RequestId id, engine::KvEnd end) override;
  Status start_load(std::span<const engine::RequestId> ids) override;
  Status wait_layer_load(int layer) override;
  bool start_save(std::span<const engine::KvStepChunk> chunks) override;
  Status save_layer(int layer) override;
  Status wait_save() override;
  engine::KvConnectorStats stats() const override;

 private:
  friend class RemotePrefill;
  explicit PdLinkConnector(PdLinkOptions options) : options_(std::move(options)) {}
  void notifications();
  bool wait_tag(uint64_t tag, std::chrono::milliseconds timeout);
  void load_ended(const std::shared_ptr<RemotePrefill::Shared>& s);

  PdLinkOptions options_;
  // Fault injection for tests (TESSERA_PD_ZERO_STATE=1 in the decode node's environment, read at create): a hybrid
  // model's recurrent state arrives but zeros are loaded in its place, so a test can show that its text check fails
  // when the state is not carried. Warned about at start and on every load it changes.
  bool zero_state_ = false;
  PdLinkControl* control_ = nullptr;
  engine::KvBlockIo* io_ = nullptr;
  std::function<void()> wake_;
  std::shared_ptr<link::Agent> agent_;

  // Decode side: staging, and completion tags as they arrive.
  link::RegionId staging_{};
  std::span<std::byte> staging_bytes_;
  std::shared_ptr<StagingAllocator> staging_alloc_;
  std::mutex tags_mu_;
  std::condition_variable tags_cv_;
  std::set<uint64_t> arrived_;  // GUARDED_BY(tags_mu_)
  std::atomic<bool> stopping_{false};
  std::thread notifier_;
  std::atomic<uint64_t> next_tag_{1};
  std::once_flag shut_;

  // Engine thread: loads by request, those of the current step, the requests the policy kept here.
  std::unordered_map<engine::RequestId, std::shared_ptr<RemotePrefill::Shared>> loads_;
  std::vector<std::shared_ptr<RemotePrefill::Shared>> loading_now_;
  std::set<engine::RequestId> counted_local_;
  std::set<engine::RequestId> matched_;  // matched for a remote prefill, blocks not allocated yet
  std::set<engine::RequestId> waited_;   // of those, asked again (counted once in waited_for_blocks)
  // Loads that ended, from any thread.
  std::mutex done_mu_;
  std::vector<std::shared_ptr<RemotePrefill::Shared>> done_;  // GUARDED_BY(done_mu_)

  // Prefill side: saves by request and those of the current step (engine thread); peers connected (any thread).
  struct StepSave {
    std::shared_ptr<SaveJob> job;
    int first = 0, end = 0;
    engine::RequestId id = 0;
  };
  std::unordered_map<engine::RequestId, std::shared_ptr<SaveJob>> saves_;
  std::vector<StepSave> saving_now_;
  struct Peer {
    std::mutex mu;
    bool connected = false;  // GUARDED_BY(mu)
  };
  std::mutex peers_mu_;
  std::unordered_map<std::string, std::shared_ptr<Peer>> peers_;  // GUARDED_BY(peers_mu_)

  mutable std::mutex counters_mu_;
  PdLinkCounters counters_;  // GUARDED_BY(counters_mu_)
};

// The registry's factory (options: PdLinkOptions).
Result<std::shared_ptr<engine::KvConnector>> make_pd_link_connector(const ConnectorSpec& spec);

}  // namespace tessera::kv
