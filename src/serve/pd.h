// Prefill/decode disaggregation on a node (the protocol is written down in docs/pd-protocol.md).
//
// A decode node (role decode) receives client requests. For a prompt whose uncached part is long enough it
// reserves staging memory in its link agent, asks a prefill node to compute the prompt, and receives the KV
// layer by layer in the canonical request layout [layer][k|v][position][kv_head][head_dim] (written by the
// prefill node as each layer finishes, completed by a write_with_imm tag), checks its checksum, converts it
// into its own cache and continues decoding from the first token the prefill node sampled. Short or mostly
// cached prompts, and any failure of the remote path (no prefill node, transfer error, checksum mismatch,
// timeout), are prefilled locally instead: a request is never lost to the disaggregated path.
//
// A prefill node (role prefill) serves POST /internal/pd/prefill. Either role answers GET /internal/pd/info.
// Both require the cluster token when one is configured. A switchable service (PdOptions::switchable) can
// change its role while it runs (set_role, docs/solver.md "Live role change").
//
// Threads: the service owns every thread it starts (per prefill call, per completion, per remote prefill, a
// notification reader and a breaker prober) and joins them in shutdown(); none is detached.
// Thread-safety: every public method may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "api/trace_context.h"
#include "base/dtype.h"
#include "base/status.h"
#include "engine/engine.h"
#include "http/http.h"

namespace tessera::serve {

// The request a remote prefill serves, for the prefill node's log (x-request-id, a child traceparent).
struct RequestTrace {
  std::string request_id;
  api::TraceContext trace;
};

struct PdOptions {
  std::string role = "both";  // prefill, decode or both: the role at start (set_role() changes it)
  // Prepare every role's machinery (decode staging memory, the prefill route) whatever the starting role,
  // so that set_role() can change it at run time (`tessera serve --role-switchable`, the planner's re-role).
  // A switchable decode node may have no prefill_urls: it then prefills where the router names
  // (x-tessera-prefill-node), or locally.
  bool switchable = false;
  std::string model_name;
  std::vector<std::string> prefill_urls;  // decode: prefill nodes, tried in turn
  int min_remote_tokens = 32;             // decode: fewer uncached prompt tokens are prefilled here
  size_t staging_bytes = 64u << 20;       // decode: link memory for KV in flight
  int transfer_timeout_ms = 30000;        // decode: a reservation not completed by then is given up
  // prefill: write each layer's KV as soon as it is computed (overlapping transfer with compute); false
  // defers every write until the prompt is done (the baseline that shows what the overlap hides).
  bool overlap = true;
  std::vector<std::string> link_endpoints = {"shm", "tcp"};
  // Where the tcp endpoint listens: an address that peers on other hosts reach (tessera join sets it).
  std::string link_host = "127.0.0.1";
  // decode: the router names the prefill node of each request (x-tessera-prefill-node, from the control
  // plane's membership), so prefill_urls may be empty; a request without a named node is prefilled here.
  bool prefill_from_router = false;
  std::string agent_name;  // default: derived from the role and the process id
  // The cluster credential: required on /internal/pd/*, sent on this node's prefill calls, and proven at
  // link connection set-up (docs/security.md). Unconfigured: all of these are open.
  ClusterToken cluster_token;
};

// Prefill peers whose KV bytes a decode node counts separately (PdStats::kv_bytes_from).
inline constexpr size_t kMaxKvPeers = 64;

struct PdStats {
  uint64_t remote = 0;         // requests whose prompt was prefilled on a prefill node
  uint64_t local = 0;          // prefilled here by choice (short or cached prompt)
  uint64_t fallbacks = 0;      // remote path failed, prefilled here instead
  uint64_t router_choice = 0;  // remote prefills done on the prefill node the router named (x-tessera-prefill-node)
  uint64_t kv_bytes = 0;       // KV bytes received
  std::map<std::string, uint64_t> kv_bytes_from;  // the same by prefill node URL (at most kMaxKvPeers of them)
  uint64_t checksum_mismatches = 0;
  uint64_t cancelled = 0;              // the client left before the prompt was prefilled (not a fallback)
  uint64_t breaker_opened = 0;         // a prefill node's breaker opened (prefill_breaker.h)
  uint64_t breaker_skipped = 0;        // times a request did not wait on a prefill node with an open breaker
  uint64_t deferred_reservations = 0;  // KV blocks could not be reserved up front; allocated at import instead
  double transfer_seconds = 0;         // time from the prefill call to the KV being imported
  // Where that time goes, summed over remote requests (the prefill node reports its part in its reply):
  double prefill_compute_seconds = 0;  // prefill node: the prompt computed and the first token sampled
  double kv_exposed_seconds = 0;       // KV transfer not hidden behind compute: prefill waiting for its
                                       // writes after the last layer, plus decode waiting for the tag
  double kv_active_seconds = 0;        // prefill node: first write issued to last write completed
  double kv_verify_seconds = 0;        // decode: checksum and copy out of the staging memory
};

class PdService {
 public:
  // The service reaches the engine only through an engine::KvConnector (engine/kv_connector.h).
  static Result<std::unique_ptr<PdService>> create(engine::Engine& engine, PdOptions options);
  ~PdService();  // shutdown()
  // Ends the work in flight (each request ends as a failure of its remote part would end it) and joins every
  // thread the service started. Stop the engine first: its callbacks for prefill calls still reach the service.
  // Idempotent.
  void shutdown();

  const PdOptions& options() const;
  // The current role (options().role until set_role() changes it).
  std::string role() const;
  // Changes the role at once: from now on the node takes only the new role's work (a prefill call reaching
  // a node that is no longer a prefill node is refused, and its caller prefills elsewhere or locally); work
  // already started finishes. FailedPrecondition when the service was not created switchable,
  // InvalidArgument for an unknown role.
  Status set_role(const std::string& role);
  PdStats stats() const;
  void register_routes(http::Server& server);

  // Decode role: generates `request` (prefilled remotely when worthwhile, else locally) reporting through
  // `callback`; `on_started` gets the engine's request id once the request is in the engine, so the caller
  // can cancel it. `prefill_url` (the router's choice, may be empty) is tried before this node's own
  // prefill nodes. Runs the remote part on a worker thread; returns at once.
  void generate(engine::GenerationRequest request, engine::OutputCallback callback,
                std::function<void(Result<engine::RequestId>)> on_started, std::shared_ptr<std::atomic<bool>> cancelled,
                std::string prefill_url = {}, RequestTrace trace = {});

 private:
  struct Impl;
  explicit PdService(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::serve
