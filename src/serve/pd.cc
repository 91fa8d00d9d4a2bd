#include "serve/pd.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
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
#include "kv/pd_link/pd_link.h"
#include "kv/registry.h"
#include "link/agent.h"
#include "serve/access_writer.h"
#include "serve/owned_threads.h"
#include "serve/prefill_breaker.h"
#include "serve/structured.h"

namespace tessera::serve {
namespace {

// The request asked for logprobs and every choice's first output carries its token's (the prefill reply sends them).
bool gen_logprobs_wanted(const std::vector<engine::RequestOutput>& choices) {
  return std::all_of(choices.begin(), choices.end(),
                     [](const engine::RequestOutput& o) { return !o.logprobs.empty(); });
}

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kProbeTimeoutMs = 500;  // the breaker's probe of an open prefill node (GET /internal/pd/info)

// One call to a prefill node in flight: `abandon` ends it early, set when the client left (`client`) or when
// another call's timeout opened that node's breaker.
struct Attempt {
  std::atomic<bool> abandon{false};
  std::shared_ptr<std::atomic<bool>> client;
  const std::atomic<bool>* engine_gone = nullptr;  // the engine dropped the request (RemotePrefill::abandoned)
};
using AttemptPtr = std::shared_ptr<Attempt>;

std::string error_json(const std::string& message) { return json{{"error", {{"message", message}}}}.dump(); }

}  // namespace

// What the decode side attaches to a request for the pd-link connector: everything a prefill call needs.
struct PdParams final : kv::PdLinkLoadParams {
  api::SamplingParams sampling;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  int logprobs = -1;  // the request's: the prefill node sends the first tokens' logprobs
  api::StructuredOutput structured;
  std::string preferred;  // the router's choice of prefill node (may be empty)
  std::shared_ptr<std::atomic<bool>> client;
  RequestTrace trace;
};

struct PdService::Impl final : kv::PdLinkControl {
  engine::Engine& engine;
  PdOptions options;
  // The data plane: link agent, staging, tags, checksums, the KV's way into and out of the engine's cache.
  std::shared_ptr<kv::PdLinkConnector> link;

  std::atomic<bool> stopping{false};
  std::atomic<size_t> next_prefill{0};
  mutable std::mutex stats_mu;
  PdStats stats;  // GUARDED_BY(stats_mu); the data plane's counters are added in PdService::stats()

  // Decode: the breaker per prefill node, its prober, and the calls in flight per node.
  PrefillBreaker breaker{SteadyClock::instance(), BreakerOptions{}};
  std::thread prober;
  std::mutex attempts_mu;
  std::map<std::string, std::set<AttemptPtr>> attempts;  // GUARDED_BY(attempts_mu)

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

  Impl(engine::Engine& e, PdOptions o) : engine(e), options(std::move(o)), role(options.role) {}

  ~Impl() override { shutdown(); }

  // Ends the work in flight promptly and joins every thread this service started: calls waiting on a prefill
  // node are abandoned, waits for completion tags end, the link fails transfers not started and gives started
  // ones a second; each request then ends the way a failure would (a decode request's prompt is computed
  // locally, a prefill call answers 502), and its thread exits.
  void shutdown() {
    std::call_once(shut, [this] {
      stopping = true;
      {
        std::lock_guard<std::mutex> lock(attempts_mu);
        for (auto& [url, set] : attempts) {
          for (const AttemptPtr& a : set) a->abandon = true;
        }
      }
      if (link) link->shutdown();
      threads.join_all();
      if (prober.joinable()) prober.join();
    });
  }

  // The sliding-window layers among the carried ones, "0"/"1" each (api::KvLayout::sliding), and their window: a
  // version 3 layout leaves their older rows out, so both sides must agree on which they are.
  std::string kv_sliding() const {
    std::string out;
    for (uint8_t sliding : engine.kv_geometry().sliding) out += sliding != 0 ? '1' : '0';
    if (out.find('1') != std::string::npos) out += fmt::format(" window={}", engine.config().sliding_window);
    return out;
  }

  json model_json() const {
    const model::ModelConfig& c = engine.config();
    // The layout version, the wire types and the state section: nodes that would lay the KV out differently
    // refuse each other (409). A node from before kv_dtype in the call would send f32 rows whatever was asked.
    return {{"name", options.model_name},
            {"n_layers", c.n_layers},
            {"kv_dim", engine.kv_geometry().kv_dim},
            {"vocab_size", c.vocab_size},
            {"kv_layout", api::kKvLayoutVersion},
            {"kv_wire", "f32 f16 bf16 q8_0 q4_0"},
            {"kv_sliding", kv_sliding()},
            {"kv_widths", engine.kv_geometry().widths},
            {"state_bytes", engine.kv_geometry().state_bytes}};
  }

  // Decode: every 50 ms, passes client cancellations and requests the engine dropped on to the calls waiting
  // for a prefill node, and probes the prefill nodes whose breaker is open (prefill_breaker.h).
  void probe_loop() {
    while (!stopping) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      {
        std::lock_guard<std::mutex> lock(attempts_mu);
        for (auto& [url, set] : attempts) {
          for (const AttemptPtr& a : set) {
            if ((a->client && *a->client) || (a->engine_gone && *a->engine_gone)) a->abandon = true;
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

  AttemptPtr begin_attempt(const std::string& url, std::shared_ptr<std::atomic<bool>> client,
                           const std::atomic<bool>* engine_gone) {
    auto a = std::make_shared<Attempt>();
    a->client = std::move(client);
    a->engine_gone = engine_gone;
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

  // ---- decode role: the policy the pd-link connector asks (engine thread, never blocking) ----
  bool disaggregate(const engine::KvRequestView& request, const kv::PdLinkLoadParams& p, int supplied) override {
    const auto& params = static_cast<const PdParams&>(p);
    const int missing = static_cast<int>(request.tokens.size()) - supplied;
    // Short or mostly cached prompts stay here; so does everything once the node is no longer a decode node, or
    // when neither the router nor this node's list names a prefill node.
    return missing >= options.min_remote_tokens && current_role() == "decode" &&
           (!params.preferred.empty() || !options.prefill_urls.empty());
  }

  void start(std::shared_ptr<kv::RemotePrefill> job) override {
    const bool running = threads.start(
        "pd remote prefill", [this, job] { remote_prefill(*job); },
        [job] { job->finish(internal_error("the prefill/decode path failed unexpectedly")); });
    if (!running) job->finish(unavailable("the node is shutting down"));
  }

  // Calls prefill nodes in turn (the router's choice first, then this node's list, skipping those whose breaker is
  // open) until one's KV arrives intact; ends the job with its first tokens, or with why none did (the engine then
  // computes the prompt here: a request is never lost to the remote path).
  void remote_prefill(kv::RemotePrefill& job) {
    const auto& p = static_cast<const PdParams&>(job.params());
    const auto t0 = Clock::now();
    auto ended = [&](Status why) {
      const bool gone = (p.client && *p.client) || job.abandoned();
      {
        std::lock_guard<std::mutex> lock(stats_mu);
        (gone ? stats.cancelled : stats.fallbacks)++;
      }
      if (!gone) {
        log::warn({p.trace.request_id, p.trace.trace.trace_id}, "remote prefill failed, prefilling locally: {}",
                  why.to_string());
      }
      job.finish(gone ? cancelled("the request ended during its remote prefill") : std::move(why));
    };
    if (Status staged = job.staged(); !staged.ok()) return ended(staged);
    const model::ModelConfig& c = engine.config();
    Status last = unavailable("no prefill node configured");
    // The router's choice first, then the others; each attempt of this request goes to a different prefill node,
    // whatever other requests do meanwhile.
    std::vector<std::string> order;
    if (!p.preferred.empty()) order.push_back(p.preferred);
    const size_t start = next_prefill++;
    for (size_t i = 0; i < options.prefill_urls.size(); ++i) {
      const std::string& url = options.prefill_urls[(start + i) % options.prefill_urls.size()];
      if (url != p.preferred) order.push_back(url);
    }
    for (const std::string& url : order) {
      if ((p.client && *p.client) || job.abandoned() || stopping) break;
      if (!breaker.allow(url)) {
        last = unavailable(fmt::format("{}: its breaker is open (it timed out or failed; probing it)", url));
        continue;
      }
      auto target = job.target();
      if (!target.ok()) {
        last = target.status();
        break;
      }
      api::PrefillCall call;
      call.prompt.assign(job.prompt().begin(), job.prompt().end());
      call.export_from = job.export_from();
      call.window_from = job.window_from();
      call.kv_dtype = job.kv_dtype();
      call.sampling = p.sampling;
      call.n = job.choices();
      call.stop_token_ids = p.stop_token_ids;
      call.ignore_eos = p.ignore_eos;
      call.logprobs = p.logprobs;
      call.structured = p.structured;
      call.agent = target->agent;
      call.region = target->region;
      call.offset = target->offset;
      call.tag = target->tag;
      call.model = model_json();
      http::Headers headers{{"Content-Type", "application/json"}};
      http::add_cluster_token(headers, options.cluster_token);
      if (!p.trace.request_id.empty()) headers[std::string(api::kRequestIdHeader)] = p.trace.request_id;
      if (!p.trace.trace.trace_id.empty())
        headers[std::string(api::kTraceparentHeader)] = p.trace.trace.child().header();
      const AttemptPtr attempt = begin_attempt(url, p.client, &job.abandoned());
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
      auto reply =
          api::parse_prefill_reply(r->body, job.bytes(), c.vocab_size, job.choices(), p.logprobs, job.kv_dtype());
      if (!reply.ok()) {
        log::warn("pd: bad prefill reply from {}: {}", url, reply.status().message());
        last = reply.status().with_context(url);
        continue;
      }
      const auto replied = Clock::now();
      // The tag (it trails the 200 by little), then the checksum of the staging bytes: corrupted KV never reaches
      // the cache.
      if (Status got = job.receive(target->tag, reply->checksum); !got.ok()) {
        last = got.with_context(url);
        continue;
      }
      std::vector<engine::TokenId> first = {reply->first_token};
      first.insert(first.end(), reply->choice_tokens.begin(), reply->choice_tokens.end());
      {
        std::lock_guard<std::mutex> lock(stats_mu);
        stats.remote++;
        stats.transfer_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
        // Per sender for the router's link view; the URL came from this node's list or the router (a token
        // holder), and the map stays bounded whatever they name.
        if (stats.kv_bytes_from.size() < kMaxKvPeers || stats.kv_bytes_from.count(url))
          stats.kv_bytes_from[url] += job.bytes();
        if (url == p.preferred) stats.router_choice++;
        stats.prefill_compute_seconds += reply->compute_ms / 1000;
        stats.kv_active_seconds += reply->transfer_ms / 1000;
        stats.kv_exposed_seconds +=
            reply->transfer_wait_ms / 1000 + std::chrono::duration<double>(Clock::now() - replied).count();
      }
      std::vector<engine::TokenLogprobs> first_logprobs;
      for (const api::FirstTokenLogprobs& l : reply->first_logprobs)
        first_logprobs.push_back({l.token, l.logprob, {l.top.begin(), l.top.end()}, 0});
      return job.finish(std::move(first), std::move(first_logprobs));
    }
    ended(last);
  }

  // ---- prefill role ----
  // Runs on a thread of its own (see register_routes): connecting to the decode node may take the link's whole
  // connect timeout.
  void handle_prefill(const http::Request& req, std::shared_ptr<http::ResponseWriter> w) {
    const model::ModelConfig& c = engine.config();
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
    const int n = static_cast<int>(call->prompt.size());
    auto job = link->prepare_save(*info, *region, call->offset, call->tag, call->export_from, n, call->kv_dtype,
                                  call->window_from);
    if (!job.ok()) {
      const bool bad = job.status().code() == StatusCode::kInvalidArgument;
      return w->send(bad ? 400 : 502, error_json(job.status().message()));
    }
    engine::GenerationRequest gen;
    gen.prompt = std::move(call->prompt);
    gen.sampling = call->sampling;
    if (!call->structured.none()) {
      auto grammar = compile_structured(engine.grammars(), call->structured);
      if (!grammar.ok()) return w->send(400, error_json(grammar.status().message()));
      gen.grammar = std::move(*grammar);
    }
    gen.max_tokens = 1;
    gen.ignore_eos = true;
    gen.n = call->n;
    // Every row sent must be real: the decode node keeps (and may cache) every one of them.
    gen.real_rows_from = call->window_from;
    gen.logprobs = call->logprobs;
    if (gen.sampling.min_tokens > 0) {
      // The first token may not be a stop token: masked as the decode node's request would mask it (the token
      // then never ends this one-token request, so it is reported).
      gen.ignore_eos = call->ignore_eos;
      gen.stop_token_ids.assign(call->stop_token_ids.begin(), call->stop_token_ids.end());
      gen.sampling.min_tokens = 1;  // all that matters for the one token drawn here
    }
    // The engine saves each computed layer of the prompt into the job's link memory and starts its write.
    gen.kv_transfer = std::make_shared<kv::PdLinkSaveParams>(*job);
    struct Outputs {
      std::vector<engine::RequestOutput> choices;  // n > 1: every choice's one output (engine thread)
      int finished = 0;
    };
    auto outs = std::make_shared<Outputs>();
    outs->choices.resize(static_cast<size_t>(gen.n));
    const auto t0 = Clock::now();
    auto id = engine.submit(std::move(gen), [this, outs, job = *job, w, t0](const engine::RequestOutput& out) {
      if (out.finish == engine::FinishReason::kNone) return;
      // Each choice ends with one output holding its one token (engine thread).
      if (out.index < 0 || static_cast<size_t>(out.index) >= outs->choices.size()) return;
      outs->choices[static_cast<size_t>(out.index)] = out;
      if (++outs->finished < static_cast<int>(outs->choices.size())) return;
      const auto computed = Clock::now();
      // Leave the engine thread: waiting for the transfers must not stall other requests.
      const bool started = threads.start(
          "pd prefill completion",
          [this, outs, job, w, t0, computed] { finish_prefill(*job, outs->choices, w, t0, computed); },
          [w] { w->send(500, error_json("internal error while sending the KV")); });
      if (!started) w->send(503, error_json("the prefill node is shutting down"));
    });
    if (!id.ok()) return w->send(api::http_status(id.status()), error_json(id.status().message()));
  }

  void finish_prefill(kv::SaveJob& job, const std::vector<engine::RequestOutput>& choices,
                      const std::shared_ptr<http::ResponseWriter>& w, Clock::time_point t0,
                      Clock::time_point computed) {
    const engine::RequestOutput& o = choices[0];
    Status st = o.finish == engine::FinishReason::kError ? o.error : ok_status();
    if (st.ok() && o.finish == engine::FinishReason::kCancelled) st = cancelled("the prefill was cancelled");
    if (st.ok() && o.tokens.empty()) st = internal_error("the prefill produced no token");
    std::vector<int32_t> choice_tokens;
    for (size_t i = 1; st.ok() && i < choices.size(); ++i) {
      const engine::RequestOutput& c = choices[i];
      if (c.finish == engine::FinishReason::kError)
        st = c.error;
      else if (c.tokens.empty())
        st = internal_error(fmt::format("choice {} of the prefill produced no token", i));
      else
        choice_tokens.push_back(c.tokens[0]);
    }
    if (!st.ok()) return w->send(502, error_json(st.message()));
    auto done = job.complete(computed);
    if (!done.ok()) {
      link->forget_peer(job.peer());  // reconnect next time: the connection may be what failed
      return w->send(502, error_json(done.status().message()));
    }
    api::PrefillReply reply;
    reply.first_token = o.tokens[0];
    reply.choice_tokens = std::move(choice_tokens);
    // The decode node has no logits for these tokens: it reports what was computed here.
    for (size_t i = 0; gen_logprobs_wanted(choices) && i < choices.size(); ++i) {
      const engine::TokenLogprobs& l = choices[i].logprobs.front();
      reply.first_logprobs.push_back({l.token, l.logprob, {l.top.begin(), l.top.end()}});
    }
    reply.checksum = done->checksum;
    reply.kv_dtype = job.kv_dtype();
    reply.bytes = done->bytes;
    reply.overlap = done->overlap;
    reply.compute_ms = std::chrono::duration<double, std::milli>(computed - t0).count();
    reply.transfer_wait_ms = done->transfer_wait_ms;
    reply.transfer_ms = done->transfer_ms;
    reply.prefill_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    w->send(200, api::prefill_reply_body(reply));
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
  kv::PdLinkOptions lo;
  lo.decode = role == api::NodeRole::kDecode || options.switchable;
  lo.staging_bytes = options.staging_bytes;
  lo.overlap = options.overlap;
  lo.endpoints = options.link_endpoints;
  lo.host = options.link_host;
  lo.agent_name = options.agent_name.empty()
                      ? fmt::format("{}-{}-{}", options.role, getpid(), std::random_device{}() % 100000)
                      : options.agent_name;
  lo.cluster_token = options.cluster_token;
  TS_ASSIGN_OR_RETURN(std::shared_ptr<engine::KvConnector> made, kv::make_connector(kv::kPdLink, {.options = lo}));
  impl->link = std::dynamic_pointer_cast<kv::PdLinkConnector>(made);
  if (!impl->link) return internal_error("the pd-link connector registered under its name is of another type");
  impl->link->set_control(impl.get());
  TS_RETURN_IF_ERROR(engine.add_connector(impl->link));
  if (lo.decode) {
    Impl* d = impl.get();
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
  const kv::PdLinkCounters l = impl_->link->counters();
  std::lock_guard<std::mutex> lock(impl_->stats_mu);
  PdStats s = impl_->stats;
  s.breaker_opened = b.opened;
  s.breaker_skipped = b.skipped;
  s.local += l.local;
  s.kv_bytes = l.kv_bytes;
  s.checksum_mismatches = l.checksum_mismatches;
  s.deferred_reservations = l.waited_for_blocks;
  s.kv_verify_seconds = l.verify_seconds;
  return s;
}

void PdService::register_routes(http::Server& server) {
  Impl* d = impl_.get();
  const ClusterToken& token = d->options.cluster_token;
  server.route("GET", "/internal/pd/info",
               http::require_cluster_token(token, [d](const http::Request&, std::shared_ptr<http::ResponseWriter> w) {
                 // current_role() only ever holds a name parse_role() accepted (create, set_role).
                 auto role = api::parse_role(d->current_role());
                 w->send(200, api::pd_info_body(role.ok() ? *role : api::NodeRole::kBoth,
                                                d->link->agent().info().encode(), d->model_json()));
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
  if (!request.sampling.seed && request.sampling.temperature > 0) {
    // Both nodes must draw from the same sequences (choice i from seed + i).
    request.sampling.seed = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  }
  if (request.prompt_logprobs >= 0) {
    // Every prompt row's logits are needed, which only a local prefill has: no connector is asked.
    std::lock_guard<std::mutex> lock(d->stats_mu);
    d->stats.local++;
  } else {
    auto p = std::make_shared<PdParams>();
    p->sampling = request.sampling;
    p->stop_token_ids.assign(request.stop_token_ids.begin(), request.stop_token_ids.end());
    p->ignore_eos = request.ignore_eos;
    p->logprobs = request.logprobs;
    if (request.grammar) p->structured = structured_of(request.grammar->spec());
    p->preferred = std::move(prefill_url);
    p->client = std::move(cancelled);
    p->trace = std::move(trace);
    request.kv_transfer = std::move(p);
  }
  // One entry into the engine: whether the prompt is prefilled elsewhere is decided at its admission, when the
  // node's own caches are known (disaggregate()), and a failed remote prefill is computed here.
  on_started(d->engine.submit(std::move(request), std::move(callback)));
}

void PdService::shutdown() { impl_->shutdown(); }

}  // namespace tessera::serve
