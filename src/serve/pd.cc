#include "serve/pd.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "api/http_status.h"
#include "api/kv_layout.h"
#include "api/pd_messages.h"
#include "api/roles.h"
#include "base/guarded.h"
#include "base/log.h"
#include "engine/kv_connector.h"
#include "link/agent.h"
#include "link/checksum.h"
#include "serve/access_writer.h"
#include "serve/owned_threads.h"
#include "serve/prefill_breaker.h"
#include "serve/structured.h"

namespace tessera::serve {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// First-fit allocator of byte ranges inside the staging region.
class RangeAllocator {
 public:
  explicit RangeAllocator(uint64_t size) { free_[0] = size; }
  std::optional<uint64_t> allocate(uint64_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    n = (n + 63) & ~uint64_t{63};
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < n) continue;
      uint64_t at = it->first, len = it->second;
      free_.erase(it);
      if (len > n) free_[at + n] = len - n;
      used_[at] = n;
      return at;
    }
    return std::nullopt;
  }
  void release(uint64_t at) {
    std::lock_guard<std::mutex> lock(mu_);
    auto u = used_.find(at);
    if (u == used_.end()) return;
    uint64_t len = u->second;
    used_.erase(u);
    auto next = free_.lower_bound(at);
    if (next != free_.end() && next->first == at + len) {
      len += next->second;
      free_.erase(next);
    }
    auto prev = free_.lower_bound(at);
    if (prev != free_.begin()) {
      --prev;
      if (prev->first + prev->second == at) {
        prev->second += len;
        return;
      }
    }
    free_[at] = len;
  }

 private:
  std::mutex mu_;
  std::map<uint64_t, uint64_t> free_, used_;
};

constexpr int kTagGraceMs = 2000;     // how long a tag may trail the prefill node's 200
constexpr int kProbeTimeoutMs = 500;  // the breaker's probe of an open prefill node (GET /internal/pd/info)

// One call to a prefill node in flight: `abandon` ends it early, set when the client left (`client`) or when
// another call's timeout opened that node's breaker.
struct Attempt {
  std::atomic<bool> abandon{false};
  std::shared_ptr<std::atomic<bool>> client;
};
using AttemptPtr = std::shared_ptr<Attempt>;

std::string error_json(const std::string& message) { return json{{"error", {{"message", message}}}}.dump(); }

}  // namespace

struct PdService::Impl {
  engine::KvConnector kv;  // the engine, as far as this service may see it
  PdOptions options;
  // Shared with the staging ranges handed to the engine (ReceivedKv::owner), which may be given back after
  // the last request thread ended.
  std::shared_ptr<link::Agent> agent;
  link::RegionId staging{};
  std::shared_ptr<RangeAllocator> staging_alloc;
  std::span<std::byte> staging_bytes;

  // Decode: notifications by tag.
  std::mutex mu;
  std::condition_variable cv;
  std::set<uint64_t> arrived;  // GUARDED_BY(mu)
  std::atomic<bool> stopping{false};
  std::thread notifier;
  std::atomic<uint64_t> next_tag{1};
  std::atomic<size_t> next_prefill{0};
  mutable std::mutex stats_mu;
  PdStats stats;  // GUARDED_BY(stats_mu)

  // Decode: the breaker per prefill node, its prober, and the calls in flight per node.
  PrefillBreaker breaker{SteadyClock::instance(), BreakerOptions{}};
  std::thread prober;
  std::mutex attempts_mu;
  std::map<std::string, std::set<AttemptPtr>> attempts;  // GUARDED_BY(attempts_mu)

  // Prefill: peers already connected. A connection is set up under its own peer's lock, never under peers_mu
  // and never on an HTTP I/O thread: a peer whose address accepts and never answers must stall only itself.
  struct Peer {
    std::mutex mu;
    bool connected = false;  // GUARDED_BY(mu)
  };
  std::mutex peers_mu;
  std::map<std::string, std::shared_ptr<Peer>> peers;  // GUARDED_BY(peers_mu)

  // The current role; written by set_role() (an admin call), read by every request.
  mutable std::mutex role_mu;
  std::string role;  // GUARDED_BY(role_mu)

  std::string current_role() const {
    std::lock_guard<std::mutex> lock(role_mu);
    return role;
  }

  // Every per-request thread (prefill calls, their completions, remote prefills); joined by shutdown().
  OwnedThreads threads;
  std::once_flag shut;

  Impl(engine::Engine& e, PdOptions o) : kv(e), options(std::move(o)), role(options.role) {}

  ~Impl() { shutdown(); }

  // Ends the work in flight promptly and joins every thread this service started: calls waiting on a prefill
  // node are abandoned, waits for completion tags end, the link fails transfers not started and gives started
  // ones a second; each request then ends the way a failure would (a decode request prefills locally, a
  // prefill call answers 502), and its thread exits.
  void shutdown() {
    std::call_once(shut, [this] {
      stopping = true;
      {
        std::lock_guard<std::mutex> lock(attempts_mu);
        for (auto& [url, set] : attempts) {
          for (const AttemptPtr& a : set) a->abandon = true;
        }
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        cv.notify_all();
      }
      if (agent) agent->shutdown(std::chrono::milliseconds(1000));
      threads.join_all();
      if (notifier.joinable()) notifier.join();
      if (prober.joinable()) prober.join();
    });
  }

  json model_json() const {
    const model::ModelConfig& c = kv.config();
    return {
        {"name", options.model_name}, {"n_layers", c.n_layers}, {"kv_dim", c.kv_dim()}, {"vocab_size", c.vocab_size}};
  }

  void notifications() {
    while (!stopping) {
      auto n = agent->next_notification(std::chrono::milliseconds(100));
      if (!n.ok()) continue;
      std::lock_guard<std::mutex> lock(mu);
      arrived.insert(n->tag);
      cv.notify_all();
    }
  }

  bool wait_tag(uint64_t tag, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu);
    bool ok = cv.wait_for(lock, timeout, [&] { return arrived.count(tag) > 0 || stopping; }) && arrived.count(tag) > 0;
    arrived.erase(tag);
    return ok;
  }

  // Decode: every 50 ms, passes client cancellations on to the calls waiting for a prefill node, and probes
  // the prefill nodes whose breaker is open (prefill_breaker.h).
  void probe_loop() {
    while (!stopping) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      {
        std::lock_guard<std::mutex> lock(attempts_mu);
        for (auto& [url, set] : attempts) {
          for (const AttemptPtr& a : set) {
            if (a->client && *a->client) a->abandon = true;
          }
        }
      }
      for (const std::string& url : breaker.due_probes()) {
        http::Headers headers;
        http::add_cluster_token(headers, options.cluster_token);
        auto r = http::fetch({.method = "GET",
                              .url = url + "/internal/pd/info",
                              .headers = std::move(headers),
                              .timeout_ms = kProbeTimeoutMs});
        const bool ok = r.ok() && r->status == 200;
        breaker.probe_result(url, ok);
        if (ok) log::info("prefill node {} answers again: one request will try it", url);
      }
    }
  }

  AttemptPtr begin_attempt(const std::string& url, std::shared_ptr<std::atomic<bool>> client) {
    auto a = std::make_shared<Attempt>();
    a->client = std::move(client);
    std::lock_guard<std::mutex> lock(attempts_mu);
    if (stopping) a->abandon = true;  // shutdown() has swept the attempts already
    attempts[url].insert(a);
    return a;
  }
  void end_attempt(const std::string& url, const AttemptPtr& a) {
    std::lock_guard<std::mutex> lock(attempts_mu);
    auto it = attempts.find(url);
    if (it == attempts.end()) return;
    it->second.erase(a);
    if (it->second.empty()) attempts.erase(it);
  }
  // The breaker of `url` just opened: nobody else waits out the timeout on it.
  void abandon_node(const std::string& url, const std::string& why) {
    log::warn("prefill node {} {}: not waiting on it until it answers a probe", url, why);
    std::lock_guard<std::mutex> lock(attempts_mu);
    auto it = attempts.find(url);
    if (it == attempts.end()) return;
    for (const AttemptPtr& a : it->second) a->abandon = true;
  }

  // ---- prefill role ----
  // Written by the engine thread (the layer hook), read by the completion thread after the request's last
  // output, which the engine delivers after its last hook call.
  struct Job {
    std::vector<uint8_t> local;
    link::RegionId local_id{};
    std::vector<link::TransferFuture> futures;
    std::vector<std::vector<link::Assignment>> deferred;  // overlap off: writes issued after the prefill
    std::optional<Clock::time_point> first_write;
    // n > 1: every choice's first output (engine thread); the prefill is over when all n have arrived.
    std::vector<engine::RequestOutput> choices;
    int finished = 0;
  };
  // Runs on a thread of its own (see register_routes): connecting to the decode node may take the link's whole
  // connect timeout.
  void handle_prefill(const http::Request& req, std::shared_ptr<http::ResponseWriter> w) {
    const model::ModelConfig& c = kv.config();
    const int max_prompt = c.max_seq_len > 0 ? c.max_seq_len : (1 << 20);
    auto call = api::parse_prefill_call(req.body, c.vocab_size, max_prompt);
    if (const std::string now = current_role(); now == "decode") {
      // Re-roled since the caller chose this node: it prefills elsewhere or locally (never lost).
      return w->send(503, error_json(fmt::format("this node is no longer a prefill node (role {})", now)));
    }
    if (!call.ok()) {
      log::warn("pd: refused a prefill request: {}", call.status().message());
      return w->send(400, error_json(call.status().message()));
    }
    if (call->model != model_json()) {
      return w->send(409, error_json(fmt::format("model mismatch: this prefill node serves {}, the request wants {}",
                                                 model_json().dump(), call->model.dump())));
    }
    auto info = link::AgentInfo::decode(call->agent);
    auto region = link::RegionDesc::decode(call->region);
    if (!info.ok() || !region.ok()) return w->send(400, error_json("bad agent or region description"));
    std::shared_ptr<Peer> p;
    {
      std::lock_guard<std::mutex> lock(peers_mu);
      auto& slot = peers[info->name];
      if (!slot) slot = std::make_shared<Peer>();
      p = slot;
    }
    {
      std::lock_guard<std::mutex> lock(p->mu);
      if (!p->connected) {
        if (Status s = agent->connect(*info); !s.ok()) return w->send(502, error_json(s.message()));
        p->connected = true;
      }
    }
    engine::GenerationRequest gen;
    gen.prompt = std::move(call->prompt);
    gen.sampling = call->sampling;
    if (!call->structured.none()) {
      auto grammar = compile_structured(kv.grammars(), call->structured);
      if (!grammar.ok()) return w->send(400, error_json(grammar.status().message()));
      gen.grammar = std::move(*grammar);
    }
    gen.max_tokens = 1;
    gen.ignore_eos = true;
    gen.n = call->n;
    if (gen.sampling.min_tokens > 0) {
      // The first token may not be a stop token: masked as the decode node's request would mask it (the token
      // then never ends this one-token request, so it is reported).
      gen.ignore_eos = call->ignore_eos;
      gen.stop_token_ids.assign(call->stop_token_ids.begin(), call->stop_token_ids.end());
      gen.sampling.min_tokens = 1;  // all that matters for the one token drawn here
    }
    gen.export_from = call->export_from;
    const int n = static_cast<int>(gen.prompt.size());
    const int count = n - gen.export_from;
    if (gen.export_from < 0 || count < 1) return w->send(400, error_json("export_from must leave at least one token"));
    const DType wire = DType::kF32;
    const api::KvLayout layout = kv.layout(count, wire);
    const size_t total = layout.bytes();
    const uint64_t remote_offset = call->offset;
    if (total > region->length || remote_offset > region->length - total) {
      return w->send(
          400, error_json(fmt::format("the reserved region holds {} bytes; {} are needed", region->length, total)));
    }
    auto job = std::make_shared<Job>();
    job->choices.resize(static_cast<size_t>(gen.n));
    job->local.resize(total);
    auto reg = agent->register_region(job->local.data(), total);
    if (!reg.ok()) return w->send(500, error_json(reg.status().message()));
    job->local_id = *reg;
    const std::string peer = info->name;
    const link::RegionId remote = region->id;
    const int from = gen.export_from;
    link::Agent* ag = agent.get();
    const bool overlap = options.overlap;
    // The engine copies each layer's rows straight into job->local (the link-registered memory: one device
    // copy per run of blocks); this hook then starts that layer's link write.
    auto on_layer = [job, peer, remote, remote_offset, from, layout, ag, overlap](int layer, int first, int cnt) {
      const size_t k_off = layout.k_offset(layer, first - from);
      const size_t v_off = layout.v_offset(layer, first - from);
      const uint64_t len = static_cast<uint64_t>(cnt) * layout.row_bytes();
      std::vector<link::Assignment> batch = {{job->local_id, k_off, remote, remote_offset + k_off, len},
                                             {job->local_id, v_off, remote, remote_offset + v_off, len}};
      // The rows are out of the paged cache now in both modes (its blocks may be reused once the request
      // finishes); only the link writes wait when the overlap is off.
      if (!overlap) {
        job->deferred.push_back(std::move(batch));
        return ok_status();
      }
      if (!job->first_write) job->first_write = Clock::now();
      job->futures.push_back(ag->write(peer, std::move(batch)));
      return ok_status();
    };
    const uint64_t tag = call->tag;
    const auto t0 = Clock::now();
    auto id = kv.submit_exporting(
        std::move(gen), from, wire, job->local, std::move(on_layer),
        [this, job, w, peer, remote, remote_offset, tag, t0, wire](const engine::RequestOutput& out) {
          if (out.finish == engine::FinishReason::kNone) return;
          // Each choice ends with one output holding its one token (engine thread).
          if (out.index < 0 || static_cast<size_t>(out.index) >= job->choices.size()) return;
          job->choices[static_cast<size_t>(out.index)] = out;
          if (++job->finished < static_cast<int>(job->choices.size())) return;
          const engine::RequestOutput& o = job->choices[0];
          const auto computed = Clock::now();
          // Leave the engine thread: waiting for the transfers must not stall other requests.
          const bool started = threads.start(
              "pd prefill completion",
              [this, job, w, peer, remote, remote_offset, tag, t0, computed, wire, o] {
                finish_prefill(job, w, peer, remote, remote_offset, tag, t0, computed, wire, o);
              },
              [w] { w->send(500, error_json("internal error while sending the KV")); });
          if (!started) {
            (void)agent->unregister_region(job->local_id);
            w->send(503, error_json("the prefill node is shutting down"));
          }
        });
    if (!id.ok()) {
      (void)agent->unregister_region(job->local_id);
      return w->send(api::http_status(id.status()), error_json(id.status().message()));
    }
  }

  void finish_prefill(const std::shared_ptr<Job>& job, const std::shared_ptr<http::ResponseWriter>& w,
                      const std::string& peer, link::RegionId remote, uint64_t remote_offset, uint64_t tag,
                      Clock::time_point t0, Clock::time_point computed, DType wire, const engine::RequestOutput& o) {
    Status st = o.finish == engine::FinishReason::kError ? o.error : ok_status();
    if (st.ok() && o.tokens.empty()) st = internal_error("the prefill produced no token");
    std::vector<int32_t> choice_tokens;
    for (size_t i = 1; st.ok() && i < job->choices.size(); ++i) {
      const engine::RequestOutput& c = job->choices[i];
      if (c.finish == engine::FinishReason::kError)
        st = c.error;
      else if (c.tokens.empty())
        st = internal_error(fmt::format("choice {} of the prefill produced no token", i));
      else
        choice_tokens.push_back(c.tokens[0]);
    }
    if (st.ok() && !job->deferred.empty()) job->first_write = Clock::now();
    for (auto& batch : job->deferred) {
      if (st.ok()) job->futures.push_back(agent->write(peer, std::move(batch)));
    }
    for (auto& f : job->futures) {
      if (!st.ok()) break;
      st = f.wait();
    }
    if (st.ok()) st = agent->write_with_imm(peer, {{job->local_id, 0, remote, remote_offset, 0}}, tag).wait();
    const auto done = Clock::now();
    const uint64_t sum = link::checksum64(job->local.data(), job->local.size());
    (void)agent->unregister_region(job->local_id);
    if (!st.ok()) {
      std::lock_guard<std::mutex> lock(peers_mu);
      peers.erase(peer);  // reconnect next time: the connection may be what failed
      return w->send(502, error_json(st.message()));
    }
    auto ms = [](Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
    api::PrefillReply reply;
    reply.first_token = o.tokens[0];
    reply.choice_tokens = std::move(choice_tokens);
    reply.checksum = sum;
    reply.kv_dtype = wire;
    reply.bytes = job->local.size();
    reply.overlap = job->deferred.empty();
    reply.compute_ms = ms(computed - t0);
    reply.transfer_wait_ms = ms(done - computed);
    reply.transfer_ms = ms(done - job->first_write.value_or(computed));
    reply.prefill_ms = ms(Clock::now() - t0);
    w->send(200, api::prefill_reply_body(reply));
  }

  // ---- decode role ----
  // Returns the KV for `gen` from `cached_tokens` on, still in the staging memory it arrived in (given back when
  // the engine has imported it), or an error (the caller then prefills locally).
  // `preferred` (the router's choice) goes first, then this node's own list in turn.
  // Prefill nodes whose breaker is open are skipped; Cancelled when the client left meanwhile.
  Result<engine::ReceivedKv> remote_prefill(const engine::GenerationRequest& gen, int cached_tokens,
                                            const std::string& preferred,
                                            const std::shared_ptr<std::atomic<bool>>& client,
                                            const RequestTrace& trace) {
    const model::ModelConfig& c = kv.config();
    const int n = static_cast<int>(gen.prompt.size());
    const int count = n - cached_tokens;
    const size_t total = kv.layout(count, DType::kF32).bytes();
    auto offset = staging_alloc->allocate(total);
    if (!offset) return resource_exhausted(fmt::format("no staging memory for {} KV bytes", total));
    auto release = [&] { staging_alloc->release(*offset); };
    auto desc = agent->describe(staging);
    if (!desc.ok()) {
      release();
      return desc.status();
    }
    Status last = unavailable("no prefill node configured");
    // The router's choice first, then the others; each attempt of this request goes to a different prefill node,
    // whatever other requests do meanwhile.
    std::vector<std::string> order;
    if (!preferred.empty()) order.push_back(preferred);
    const size_t start = next_prefill++;
    for (size_t i = 0; i < options.prefill_urls.size(); ++i) {
      const std::string& url = options.prefill_urls[(start + i) % options.prefill_urls.size()];
      if (url != preferred) order.push_back(url);
    }
    for (const std::string& url : order) {
      if ((client && *client) || stopping) break;
      if (!breaker.allow(url)) {
        last = unavailable(fmt::format("{}: its breaker is open (it timed out or failed; probing it)", url));
        continue;
      }
      const uint64_t tag = (static_cast<uint64_t>(getpid()) << 40) ^ next_tag++;
      api::PrefillCall call;
      call.prompt = gen.prompt;
      call.export_from = cached_tokens;
      call.sampling = gen.sampling;
      call.n = gen.n;
      call.stop_token_ids.assign(gen.stop_token_ids.begin(), gen.stop_token_ids.end());
      call.ignore_eos = gen.ignore_eos;
      if (gen.grammar) call.structured = structured_of(gen.grammar->spec());
      call.agent = agent->info().encode();
      call.region = desc->encode();
      call.offset = *offset;
      call.tag = tag;
      call.model = model_json();
      http::Headers headers{{"Content-Type", "application/json"}};
      http::add_cluster_token(headers, options.cluster_token);
      if (!trace.request_id.empty()) headers[std::string(api::kRequestIdHeader)] = trace.request_id;
      if (!trace.trace.trace_id.empty()) headers[std::string(api::kTraceparentHeader)] = trace.trace.child().header();
      const AttemptPtr attempt = begin_attempt(url, client);
      auto r = http::fetch({.method = "POST",
                            .url = url + "/internal/pd/prefill",
                            .headers = std::move(headers),
                            .body = api::prefill_call_body(call),
                            .timeout_ms = options.transfer_timeout_ms,
                            .cancel = &attempt->abandon});
      end_attempt(url, attempt);
      if (!r.ok()) {
        last = r.status().with_context(url);
        if (r.status().code() == StatusCode::kCancelled) continue;  // the client left, or the breaker opened
        const bool timed_out = r.status().code() == StatusCode::kDeadlineExceeded;
        if (timed_out ? breaker.timeout(url) : breaker.error(url)) {
          abandon_node(url, timed_out ? "timed out" : "keeps failing");
        }
        continue;
      }
      if (r->status >= 500) {
        if (breaker.error(url)) abandon_node(url, "keeps failing");
      } else {
        breaker.success(url);  // it answered: alive, whatever it said
      }
      if (r->status != 200) {
        last = unavailable(fmt::format("{}: HTTP {} {}", url, r->status, r->body.substr(0, 200)));
        continue;
      }
      // Validated before waiting for the tag: a malformed reply is that prefill node's fault, and this request
      // goes on to the next one (or prefills here).
      auto reply = api::parse_prefill_reply(r->body, total, c.vocab_size, gen.n);
      if (!reply.ok()) {
        log::warn("pd: bad prefill reply from {}: {}", url, reply.status().message());
        last = reply.status().with_context(url);
        continue;
      }
      const auto replied = Clock::now();
      // The prefill node answers 200 only after its tagged write completed, so the tag is due at once; a lost
      // one must not hold the request for the whole transfer timeout.
      if (!wait_tag(tag, std::chrono::milliseconds(std::min(options.transfer_timeout_ms, kTagGraceMs)))) {
        last = deadline_exceeded(fmt::format("{}: the KV completion tag never arrived", url));
        continue;
      }
      const auto tagged = Clock::now();
      const uint8_t* data = reinterpret_cast<const uint8_t*>(staging_bytes.data()) + *offset;
      if (link::checksum64(data, total) != reply->checksum) {
        std::lock_guard<std::mutex> lock(stats_mu);
        stats.checksum_mismatches++;
        last = data_loss(fmt::format("{}: KV checksum mismatch", url));
        continue;
      }
      // The engine imports straight from the staging range (one device copy per run of blocks per layer); the
      // range goes back to the allocator when the engine lets go of it.
      engine::ReceivedKv received;
      received.bytes = {data, total};
      received.dtype = DType::kF32;
      received.first_token = reply->first_token;
      received.choice_tokens.assign(reply->choice_tokens.begin(), reply->choice_tokens.end());
      received.owner =
          std::shared_ptr<const void>(data, [alloc = staging_alloc, agent = agent, at = *offset](const void*) {
            alloc->release(at);  // `agent` keeps the staging region mapped until then
          });
      std::lock_guard<std::mutex> lock(stats_mu);
      stats.kv_bytes += total;
      // Per sender for the router's link view; the URL came from this node's list or the router (a token holder),
      // and the map stays bounded whatever they name.
      if (stats.kv_bytes_from.size() < kMaxKvPeers || stats.kv_bytes_from.count(url)) stats.kv_bytes_from[url] += total;
      if (url == preferred) stats.router_choice++;
      stats.prefill_compute_seconds += reply->compute_ms / 1000;
      stats.kv_active_seconds += reply->transfer_ms / 1000;
      stats.kv_exposed_seconds +=
          reply->transfer_wait_ms / 1000 + std::chrono::duration<double>(tagged - replied).count();
      stats.kv_verify_seconds += std::chrono::duration<double>(Clock::now() - tagged).count();
      return received;
    }
    release();
    if (client && *client) return cancelled("the client went away during the remote prefill");
    return last;
  }
};

PdService::PdService(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PdService::~PdService() = default;

Result<std::unique_ptr<PdService>> PdService::create(engine::Engine& engine, PdOptions options) {
  TS_ASSIGN_OR_RETURN(const api::NodeRole role, api::parse_role(options.role));
  if (role == api::NodeRole::kDecode && options.prefill_urls.empty() && !options.switchable &&
      !options.prefill_from_router) {
    return invalid_argument("a decode node needs --prefill-nodes URL[,URL...] (or --ctrl, where a router names them)");
  }
  auto impl = std::make_unique<Impl>(engine, options);
  link::AgentOptions ao;
  ao.name = options.agent_name.empty()
                ? fmt::format("{}-{}-{}", options.role, getpid(), std::random_device{}() % 100000)
                : options.agent_name;
  ao.endpoints = options.link_endpoints;
  ao.host = options.link_host;
  ao.link.cluster_token = options.cluster_token;
  TS_ASSIGN_OR_RETURN(impl->agent, link::Agent::create(ao));
  if (role == api::NodeRole::kDecode || options.switchable) {
    TS_ASSIGN_OR_RETURN(impl->staging, impl->agent->allocate_region(options.staging_bytes));
    TS_ASSIGN_OR_RETURN(impl->staging_bytes, impl->agent->host_bytes(impl->staging));
    impl->staging_alloc = std::make_unique<RangeAllocator>(options.staging_bytes);
    Impl* d = impl.get();
    impl->notifier = std::thread([d] { d->notifications(); });
    impl->prober = std::thread([d] { d->probe_loop(); });
  }
  return std::unique_ptr<PdService>(new PdService(std::move(impl)));
}

const PdOptions& PdService::options() const { return impl_->options; }

std::string PdService::role() const { return impl_->current_role(); }

Status PdService::set_role(const std::string& role) {
  TS_RETURN_IF_ERROR(api::parse_role(role).status());
  std::lock_guard<std::mutex> lock(impl_->role_mu);
  if (role == impl_->role) return ok_status();
  if (!impl_->options.switchable) {
    return failed_precondition(fmt::format(
        "this node was started as a {} node without --role-switchable; its role cannot change", impl_->role));
  }
  log::info("pd: role {} -> {}", impl_->role, role);
  impl_->role = role;
  return ok_status();
}

PdStats PdService::stats() const {
  const BreakerCounters b = impl_->breaker.counters();
  std::lock_guard<std::mutex> lock(impl_->stats_mu);
  PdStats s = impl_->stats;
  s.breaker_opened = b.opened;
  s.breaker_skipped = b.skipped;
  return s;
}

void PdService::register_routes(http::Server& server) {
  Impl* d = impl_.get();
  const ClusterToken& token = d->options.cluster_token;
  server.route("GET", "/internal/pd/info",
               http::require_cluster_token(token, [d](const http::Request&, std::shared_ptr<http::ResponseWriter> w) {
                 // current_role() only ever holds a name parse_role() accepted (create, set_role).
                 auto role = api::parse_role(d->current_role());
                 w->send(200, api::pd_info_body(role.ok() ? *role : api::NodeRole::kBoth, d->agent->info().encode(),
                                                d->model_json()));
               }));
  if (d->options.role == "prefill" || d->options.role == "both" || d->options.switchable) {
    server.route(
        "POST", "/internal/pd/prefill",
        http::require_cluster_token(token, [d](const http::Request& r, std::shared_ptr<http::ResponseWriter> w_in) {
          // One access line per prefill call, with the decode node's request id and trace (whatever path answers).
          auto tag = tag_of(r, "pd");
          tag->model = d->options.model_name;
          auto w = with_access_log(std::move(w_in), std::move(tag));
          // Off the I/O thread: with 2 I/O threads, two calls naming an agent address that never answers used
          // to freeze the node's HTTP face for the link's connect timeout (issue 20).
          const bool started = d->threads.start(
              "pd prefill", [d, r, w] { d->handle_prefill(r, w); },
              [w] { w->send(500, error_json("the prefill request failed unexpectedly")); });
          if (!started) w->send(503, error_json("the prefill node is shutting down"));
        }));
  }
}

void PdService::generate(engine::GenerationRequest request, engine::OutputCallback callback,
                         std::function<void(Result<engine::RequestId>)> on_started,
                         std::shared_ptr<std::atomic<bool>> cancelled, std::string prefill_url, RequestTrace trace) {
  Impl* d = impl_.get();
  // Both the body and the exception path may answer; `started` makes sure exactly one does.
  auto started = std::make_shared<std::atomic<bool>>(false);
  auto start = [started, on_started](Result<engine::RequestId> id) {
    if (!started->exchange(true)) on_started(std::move(id));
  };
  auto body = [d, request = std::move(request), callback = std::move(callback), start, cancelled,
               prefill_url = std::move(prefill_url), trace = std::move(trace)]() mutable {
    auto local = [&](bool fallback) {
      std::lock_guard<std::mutex> lock(d->stats_mu);
      (fallback ? d->stats.fallbacks : d->stats.local)++;
    };
    if (!request.sampling.seed && request.sampling.temperature > 0) {
      // Both nodes must draw from the same sequences (choice i from seed + i).
      request.sampling.seed = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
    }
    auto blocks = d->kv.hold_blocks(request.prompt);
    const int n = static_cast<int>(request.prompt.size());
    const bool nowhere = prefill_url.empty() && d->options.prefill_urls.empty();  // no router pick, no list
    // prompt_logprobs needs every prompt row's logits, which only a local prefill has.
    if (!blocks.ok() || n - blocks->cached_tokens() < d->options.min_remote_tokens || d->current_role() != "decode" ||
        nowhere || request.prompt_logprobs >= 0) {
      if (blocks.ok()) blocks->release();
      local(false);
      return start(d->kv.submit(std::move(request), std::move(callback)));
    }
    const auto t0 = Clock::now();
    if (!d->kv.reserve_rest(*blocks, n)) {
      std::lock_guard<std::mutex> lock(d->stats_mu);
      d->stats.deferred_reservations++;
    }
    auto kv = d->remote_prefill(request, blocks->cached_tokens(), prefill_url, cancelled, trace);
    if (*cancelled) {  // the client left: neither a fallback nor work worth doing
      {
        std::lock_guard<std::mutex> lock(d->stats_mu);
        d->stats.cancelled++;
      }
      return start(tessera::cancelled("the client went away before its prompt was prefilled"));
    }
    if (!kv.ok()) {
      log::warn({trace.request_id, trace.trace.trace_id}, "remote prefill failed, prefilling locally: {}",
                kv.status().to_string());
      blocks->release();
      local(true);
      return start(d->kv.submit(std::move(request), std::move(callback)));
    }
    {
      std::lock_guard<std::mutex> lock(d->stats_mu);
      d->stats.remote++;
      d->stats.transfer_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    }
    start(d->kv.submit_imported(std::move(request), std::move(*blocks), std::move(*kv), std::move(callback)));
  };
  const bool running = d->threads.start("pd generate", std::move(body), [start] {
    start(internal_error("the prefill/decode path failed unexpectedly"));
  });
  if (!running) start(unavailable("the node is shutting down"));
}

void PdService::shutdown() { impl_->shutdown(); }

}  // namespace tessera::serve
