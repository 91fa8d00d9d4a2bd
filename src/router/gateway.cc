#include "router/gateway.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "api/headers.h"
#include "api/health.h"
#include "api/openai.h"
#include "api/pd_messages.h"
#include "api/resume.h"
#include "api/trace_context.h"
#include "base/log.h"
#include "base/task_pool.h"
#include "router/admin_api.h"
#include "router/metrics.h"
#include "router/migration.h"
#include "router/models_listing.h"
#include "router/pd_pairing.h"
#include "router/prober.h"

namespace tessera::router {
namespace {

constexpr int kProbeThreads = 8;                 // health probes in flight at once, whatever the node count
constexpr size_t kModelsFanout = 16;             // nodes asked for /v1/models at once
constexpr int64_t kMaxReportedTokens = 1 << 24;  // a node's completion_tokens beyond this is not believed

using json = nlohmann::json;
using SteadyTime = std::chrono::steady_clock;
using WriterPtr = std::shared_ptr<http::ResponseWriter>;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

double since(SteadyTime::time_point t) { return std::chrono::duration<double>(SteadyTime::now() - t).count(); }

std::string error_json(int status, std::string message, std::string type, std::string code = "") {
  api::ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.code = std::move(code);
  return api::error_body(e);
}

// Counts SSE events carrying data in a piece of a stream (an approximation of tokens for speed accounting;
// a piece boundary inside "data: " loses one).
int64_t count_events(std::string_view s) {
  int64_t n = 0;
  for (size_t at = s.find("data: {"); at != std::string_view::npos; at = s.find("data: {", at + 1)) ++n;
  return n;
}

// One proxied API call.
struct Call {
  WriterPtr writer;
  std::string endpoint;  // "completions" or "chat"
  std::string path;
  std::string body;
  std::string request_id;
  api::TraceContext trace;  // the client's traceparent, or a new trace; each upstream attempt sends a child
  std::string model;        // for the access line
  std::string remote;       // the client's address
  std::string session_id;
  bool stream = false;
  bool token_ids = false;      // the client asked for token-id comments (api/resume.h)
  bool include_usage = false;  // the client asked for the usage chunk (stream_options.include_usage)
  int choices = 1;             // n times the prompts: a stream of several cannot migrate (migration.h)
  bool internal = false;       // the caller holds the cluster credential (or none is configured): may see node URLs
  RouteRequest route;
  int64_t reserved_tokens = 0;
  std::string prefill_url;  // PD mode: the prefill node paired with the current attempt's decode node
  SteadyTime::time_point start = SteadyTime::now();
  double first_token_s = -1;  // since start, the first data event forwarded; < 0: none (or not streamed)
  int64_t tokens = 0;         // output tokens forwarded (token ids tracked, or usage.completion_tokens)
  std::atomic<bool> client_gone{false};
  std::mutex mu;
  std::shared_ptr<std::atomic<bool>> attempt;  // GUARDED_BY(mu): cancels the current upstream exchange

  void client_left() {
    client_gone = true;
    std::lock_guard lock(mu);
    if (attempt) *attempt = true;
  }
};

using CancelFlag = std::shared_ptr<std::atomic<bool>>;

}  // namespace

struct Gateway::Impl {
  GatewayOptions options;
  std::unique_ptr<Strategy> strategy;  // GUARDED_BY(strategy_mu)
  std::mutex strategy_mu;
  NodeRegistry registry;
  RouterMetrics metrics;
  LiveStats live{wall_clock()};  // the dashboard's per-second history (live_stats.h)
  http::Server server;
  mutable http::ConnectionPool upstream_pool;  // keep-alive connections to the nodes (thread-safe)
  std::atomic<uint64_t> next_pair{0};          // rotates PD pair ties
  std::mutex inflight_mu;
  std::map<std::string, std::set<CancelFlag>> inflight;  // GUARDED_BY(inflight_mu): per node, open exchanges
  KvEventIndex kv_index;                                 // what each node's prefix cache holds (its KV events)
  std::unique_ptr<KvEventPoller> kv_poller;              // set when the strategy matches prefixes and kv_events is on
  // The proxy's workers. Declared after everything their tasks touch (the server's response writers included): its
  // destructor joins them, and a task may still be finishing, or releasing its writer, when the gateway goes.
  TaskPool pool;
  Prober prober;  // active health checks (prober.h); declared last: stopped before what it calls into
  std::atomic<bool> stopped{false};

  Impl(GatewayOptions o, std::unique_ptr<Strategy> s)
      : options(std::move(o)),
        strategy(std::move(s)),
        registry(SteadyClock::instance(), options.health),
        server(options.http),
        pool("router worker", options.workers, options.max_queue),
        prober(registry, {.cluster_token = options.cluster_token,
                          .tls_ca_file = options.upstream_tls_ca_file,
                          .timeout_ms = static_cast<int>(options.health.probe_timeout_ms),
                          .threads = kProbeThreads,
                          .on_out_of_rotation = [this](const std::string& url) { cancel_node(url); }}) {
    if (options.kv_events && (options.strategy == "kv_aware" || options.strategy == "prefix_cache")) {
      kv_poller = std::make_unique<KvEventPoller>(
          kv_index, [this] { return urls_of(registry.candidates()); },
          KvEventPollerOptions{.cluster_token = options.cluster_token,
                               .tls_ca_file = options.upstream_tls_ca_file,
                               .interval_ms = options.kv_events_interval_ms});
    }
  }

  // ---- helpers -------------------------------------------------------------------------------------------

  bool authorized(const http::Request& r, const WriterPtr& w, std::string_view endpoint) {
    if (options.api_keys.empty()) return true;
    const std::string auth = r.header("authorization");
    if (http::api_key_matches(http::bearer_token(r), options.api_keys)) return true;
    metrics.request_finished(endpoint, 401);
    w->send(401, error_json(401,
                            auth.empty() ? "You didn't provide an API key: send it as 'Authorization: Bearer KEY'"
                                         : "Incorrect API key provided",
                            "invalid_request_error", "invalid_api_key"));
    return false;
  }

  // The next attempt's node, among those serving the request's model (a PD pair never crosses models); in PD mode
  // (prefill nodes known, decode nodes in rotation) the decode node and `prefill` are a pair, or a colocated node
  // when cheaper (pd_pairing.h); otherwise the strategy picks and `prefill` is empty.
  std::string pick(const RouteRequest& r, const std::set<std::string>& tried, std::string& prefill) {
    prefill.clear();
    std::vector<NodeSnapshot> nodes = serving_model(registry.candidates(tried), r.model);
    // Embeddings go to pooling nodes and text to generate nodes; a node whose runner is not known yet may take
    // either (it answers 400 to what it does not serve); /tokenize and /detokenize go anywhere.
    std::erase_if(
        nodes, [&](const NodeSnapshot& n) { return !r.runner.empty() && !n.runner.empty() && n.runner != r.runner; });
    if (nodes.empty()) return "";
    if (const int bt = options.strategy_options.block_tokens; kv_poller && r.exact_tokens) {
      kv_index.annotate(nodes, block_chain(r.tokens, bt), bt);
    }
    if (options.pd_pairing && r.runner != "pooling") {
      std::vector<NodeSnapshot> prefills = serving_model(registry.prefill_candidates(), r.model);
      std::vector<NodeSnapshot> decodes, colocated;
      for (const auto& n : nodes) (n.role == "decode" ? decodes : colocated).push_back(n);
      if (!prefills.empty() && !decodes.empty()) {
        PdRoute route = choose_pd_route(decodes, prefills, colocated, options.pairing, next_pair++);
        std::string url = route.pair ? decodes[route.pair->decode].url : colocated[*route.colocated].url;
        if (route.pair) {
          prefill = prefills[route.pair->prefill].url;
          metrics.pd_pair(route.pair->same_host ? "shm" : "tcp");
        }
        std::lock_guard lock(strategy_mu);
        strategy->on_routed(r, url);
        return url;
      }
    }
    std::lock_guard lock(strategy_mu);
    const size_t i = strategy->pick(r, nodes);
    strategy->on_routed(r, nodes[i].url);
    return nodes[i].url;
  }

  void note_outcome(const std::string& url, int64_t reserved, int64_t generated, RequestOutcome outcome) {
    if (registry.finish(url, reserved, generated, outcome)) {
      log::warn("router: node {} ejected after failed requests", url);
      cancel_node(url);
    }
  }

  // An upstream exchange with `url` begins: its cancel flag is set when the client leaves or the node is
  // ejected, so no request waits on a node that stopped answering.
  CancelFlag begin_attempt(Call& c, const std::string& url) {
    auto flag = std::make_shared<std::atomic<bool>>(false);
    {
      std::lock_guard lock(c.mu);
      c.attempt = flag;
      if (c.client_gone) *flag = true;
    }
    {
      std::lock_guard lock(inflight_mu);
      inflight[url].insert(flag);
    }
    // The node may have left rotation between pick() and now: cancel_node() ran before the flag was in the set
    // and will not run again, so this exchange would wait out the whole upstream timeout on a node that never
    // answers (the 3-in-1600 hang of issue 20, with fake nodes ejected under load). Checked after the insert, so
    // either this sees the ejection or cancel_node() sees the flag.
    if (auto s = registry.status(url); !s || (!s->healthy && !s->draining)) *flag = true;
    return flag;
  }
  void end_attempt(Call& c, const std::string& url, const CancelFlag& flag) {
    {
      std::lock_guard lock(c.mu);
      c.attempt = nullptr;
    }
    std::lock_guard lock(inflight_mu);
    auto it = inflight.find(url);
    if (it == inflight.end()) return;
    it->second.erase(flag);
    if (it->second.empty()) inflight.erase(it);
  }
  // The node left rotation: abandon what is open there (retried elsewhere when nothing was forwarded yet).
  // A draining node is not failing: what it has open finishes there (or breaks on its own and migrates).
  void cancel_node(const std::string& url) {
    if (auto s = registry.status(url); s && s->draining) {
      log::info("router: node {} is draining: its open exchanges are left to finish", url);
      return;
    }
    std::lock_guard lock(inflight_mu);
    auto it = inflight.find(url);
    if (it == inflight.end()) return;
    for (const auto& f : it->second) *f = true;
  }

  void backoff(int attempt) {
    const int ms = std::min(500, options.backoff_ms << std::min(attempt, 16));
    if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  }

  http::ClientRequest upstream_request(const Call& c, const std::string& url, const CancelFlag& cancel) const {
    http::ClientRequest req;
    req.cancel = cancel.get();
    if (options.upstream_keepalive) req.pool = &upstream_pool;
    req.method = "POST";
    req.url = url + c.path;
    req.body = c.body;
    req.timeout_ms = options.upstream_timeout_ms;
    req.headers["content-type"] = "application/json";
    http::add_cluster_token(req.headers, options.cluster_token);
    req.tls_ca_file = options.upstream_tls_ca_file;
    req.headers[std::string(api::kRequestIdHeader)] = c.request_id;
    req.headers[std::string(api::kTraceparentHeader)] = c.trace.child().header();
    if (!c.session_id.empty()) req.headers["x-session-id"] = c.session_id;
    if (!c.prefill_url.empty()) req.headers[std::string(api::kPrefillNodeHeader)] = c.prefill_url;
    return req;
  }

  // Headers the client gets back: the request id; and, for a caller that holds the cluster credential (or on
  // an open single-user cluster), the node that answers and in PD mode the prefill node chosen. A public client
  // is not told the cluster's internal addresses.
  static http::Headers reply_headers(const Call& c, const std::string& url) {
    http::Headers h{{"x-request-id", c.request_id}};
    if (!c.internal) return h;
    h[std::string(api::kServingNodeHeader)] = url;
    if (!c.prefill_url.empty()) h[std::string(api::kPrefillNodeHeader)] = c.prefill_url;
    return h;
  }

  // The dashboard's TTFT and token count of a stream: the first data event forwarded, the tokens tracked.
  static void note_tokens(Call& c, const StreamTracker& tracker, std::string_view forwarded) {
    if (c.first_token_s < 0 && (tracker.tokens() > 0 || count_events(forwarded) > 0)) c.first_token_s = since(c.start);
    // A node that sends no token ids (not a tessera node) is counted by its data events.
    c.tokens = tracker.tokens() > 0 ? static_cast<int64_t>(tracker.tokens()) : c.tokens + count_events(forwarded);
  }

  // One access line per client request (base/log.h), however it ended.
  static void access_line(const Call& c, int status) {
    const double total = since(c.start);
    log::access({.method = "POST",
                 .route = c.path,
                 .model = c.model,
                 .status = status,
                 .prompt_tokens = c.route.prompt_tokens > 0 ? c.route.prompt_tokens : -1,
                 .completion_tokens = c.tokens,
                 .ttft_ms = c.first_token_s >= 0 ? c.first_token_s * 1000 : -1,
                 .total_ms = total * 1000,
                 .request_id = c.request_id,
                 .trace_id = c.trace.trace_id,
                 .remote = c.remote});
  }

  void finish(Call& c, int status) {
    const double total = since(c.start);
    metrics.request_finished(c.endpoint, status);
    metrics.request_latency(total);
    access_line(c, status);
    const bool timed = c.first_token_s >= 0;
    live.record({c.first_token_s, timed && c.tokens >= 2 ? (total - c.first_token_s) / (c.tokens - 1) : -1, c.tokens,
                 (status >= 200 && status < 300) || status == 499});
  }

  // OpenAI's answer for a model nobody serves: 404, param "model", code "model_not_found"; the models that are
  // served are named (they are listed by GET /v1/models anyway).
  void reply_unknown_model(Call& c) {
    finish(c, 404);
    c.writer->send(404, unknown_model_error(c.model, registry.models()), "application/json",
                   {{"x-request-id", c.request_id}});
  }

  // Whether options.tokenize applies to `model` (the router's tokenizer is one model's).
  bool tokenizes(const std::string& model) const {
    return options.tokenize && (options.tokenize_model.empty() || options.tokenize_model == model);
  }

  void reply_error(Call& c, int status, std::string message, std::string type, std::string code = "") {
    finish(c, status);
    c.writer->send(status, error_json(status, std::move(message), std::move(type), std::move(code)), "application/json",
                   {{"x-request-id", c.request_id}});
  }

  // /admin/*: the cluster token when one is configured (an operator's credential, not a client's); otherwise
  // the API keys, as before.
  http::Handler admin(std::function<void(const http::Request&, const WriterPtr&)> h) {
    if (options.cluster_token.configured()) {
      return http::require_cluster_token(options.cluster_token,
                                         [h = std::move(h)](const http::Request& r, WriterPtr w) { h(r, w); });
    }
    return [this, h = std::move(h)](const http::Request& r, WriterPtr w) {
      if (authorized(r, w, "admin")) h(r, w);
    };
  }

  static bool retryable(int status) { return status >= 500 || status == 429; }
  // What a node's answer says about its health: a draining node is alive, only closed for new work.
  RequestOutcome outcome_from(const std::string& url, const http::Response& r) {
    if (!draining_answer(r)) return outcome_of(r.status);
    if (registry.set_node_draining(url, true)) log::info("router: node {} is draining", url);
    return RequestOutcome::kSuccess;
  }
  static RequestOutcome outcome_of(int status) {
    return status >= 500 ? RequestOutcome::kServerError : RequestOutcome::kSuccess;
  }

  // ---- the proxy (runs on a pool worker) ------------------------------------------------------------------

  void proxy(const std::shared_ptr<Call>& c) {
    std::set<std::string> tried;
    std::string last_error = "no node is in rotation";
    int last_status = 503;
    for (int attempt = 0; attempt < options.max_attempts; ++attempt) {
      if (c->client_gone) return finish(*c, 499);
      std::string prefill;
      const std::string url = pick(c->route, tried, prefill);
      if (url.empty()) {
        // The nodes' model lists arrived while this request waited (a node's first /health names its models): a
        // model none of them serves is a 404, as it would have been on arrival, not a 503.
        if (tried.empty() && !registry.may_serve(c->model)) return reply_unknown_model(*c);
        break;
      }
      if (attempt > 0) {
        metrics.retry();
        backoff(attempt - 1);
      }
      tried.insert(url);
      const bool last = attempt + 1 == options.max_attempts;
      registry.begin(url, c->reserved_tokens);
      c->prefill_url = prefill;
      if (!prefill.empty()) registry.begin(prefill, c->route.prompt_tokens);
      const CancelFlag cancel = begin_attempt(*c, url);
      const bool done = c->stream ? stream_once(c, url, cancel, last, last_status, last_error)
                                  : whole_once(*c, url, cancel, last, last_status, last_error);
      end_attempt(*c, url, cancel);
      // The prefill node's share is over with the attempt (its own failures are the decode node's to handle).
      if (!prefill.empty()) registry.finish(prefill, c->route.prompt_tokens, 0, RequestOutcome::kSuccess);
      if (done) return;
    }
    reply_error(*c, last_status == 429 ? 429 : 503, fmt::format("no node could serve the request: {}", last_error),
                last_status == 429 ? "rate_limit_error" : "service_unavailable",
                last_status == 429 ? "server_busy" : "");
  }

  // Non-streaming: the answer is read whole (small), so any failure can still be retried. True when answered.
  bool whole_once(Call& c, const std::string& url, const CancelFlag& cancel, bool last, int& last_status,
                  std::string& last_error) {
    auto r = http::fetch(upstream_request(c, url, cancel));
    if (!r.ok()) {
      if (c.client_gone) {
        note_outcome(url, c.reserved_tokens, 0, RequestOutcome::kSuccess);
        finish(c, 499);
        return true;
      }
      note_outcome(url, c.reserved_tokens, 0, RequestOutcome::kConnectError);
      metrics.upstream_failure("connect");
      last_status = 503;
      last_error = r.status().message();
      return false;
    }
    int64_t generated = 0;
    if (r->status == 200) {
      // The node's count feeds its load estimate: a non-number or an absurd value is ignored, not trusted.
      json j = json::parse(r->body, nullptr, false);
      if (j.is_object() && j.contains("usage") && j["usage"].is_object()) {
        const json& n = j["usage"]["completion_tokens"];
        if (n.is_number_integer() && n.get<int64_t>() >= 0 && n.get<int64_t>() <= kMaxReportedTokens) {
          generated = n.get<int64_t>();
        }
      }
    }
    note_outcome(url, c.reserved_tokens, generated, outcome_from(url, *r));
    if (retryable(r->status) && !last) {
      metrics.upstream_failure(r->status == 429 ? "429" : "5xx");
      last_status = r->status;
      last_error = fmt::format("{} answered {}", url, r->status);
      return false;
    }
    metrics.first_byte(since(c.start));
    c.tokens = generated;
    finish(c, r->status);
    auto ct = r->headers.find("content-type");
    c.writer->send(r->status, std::move(r->body), ct == r->headers.end() ? "application/json" : ct->second,
                   reply_headers(c, url));
    return true;
  }

  // Streaming: forwarded piece by piece. True when the call is over (answered, failed mid-stream, or the
  // client left); false to try another node (nothing was forwarded yet).
  bool stream_once(const std::shared_ptr<Call>& c, const std::string& url, const CancelFlag& cancel, bool last,
                   int& last_status, std::string& last_error) {
    bool started = false;
    int status = 0;
    int64_t generated = 0;
    RequestOutcome head_outcome = RequestOutcome::kSuccess;
    auto on_headers = [&](const http::Response& head) {
      status = head.status;
      head_outcome = outcome_from(url, head);
      if (retryable(head.status) && !last) return false;
      started = true;
      metrics.first_byte(since(c->start));
      auto ct = head.headers.find("content-type");
      c->writer->start_stream(head.status, ct == head.headers.end() ? "text/event-stream" : ct->second,
                              reply_headers(*c, url));
      return true;
    };
    // Token ids seen, for continuing elsewhere if this node dies (migration.h).
    StreamTracker tracker(c->token_ids, c->choices, c->include_usage);
    auto on_chunk = [&](std::string_view piece) {
      if (c->client_gone) return false;
      generated += count_events(piece);
      if (status != 200) return c->writer->write(std::string(piece));  // an error body, not SSE
      std::string out = tracker.feed(piece);
      note_tokens(*c, tracker, out);
      return out.empty() || c->writer->write(out);
    };
    http::ClientRequest up = upstream_request(*c, url, cancel);
    up.headers[std::string(api::kTokenIdsHeader)] = "1";
    auto r = http::fetch_streaming(up, on_headers, on_chunk);
    if (!r.ok() && c->client_gone) {
      note_outcome(url, c->reserved_tokens, generated, RequestOutcome::kSuccess);
      if (started) c->writer->end();
      finish(*c, 499);
      return true;
    }
    if (!r.ok()) {
      note_outcome(url, c->reserved_tokens, generated, RequestOutcome::kConnectError);
      if (!started) {
        metrics.upstream_failure("connect");
        last_status = 503;
        last_error = r.status().message();
        return false;
      }
      metrics.upstream_failure("stream");
      if (continue_elsewhere(c, url, tracker).ok()) {
        c->writer->end();
        finish(*c, 200);
        return true;
      }
      // The stream could not continue elsewhere: it ends with an error event the client can see.
      const std::string err = error_json(502, fmt::format("the node failed mid-stream: {}", r.status().message()),
                                         "upstream_error", "upstream_failed");
      c->writer->write("data: " + err + "\n\n");
      c->writer->write("data: [DONE]\n\n");
      c->writer->end();
      finish(*c, 502);
      return true;
    }
    note_outcome(url, c->reserved_tokens, generated, head_outcome);
    if (!started) {
      metrics.upstream_failure(status == 429 ? "429" : "5xx");
      last_status = status;
      last_error = fmt::format("{} answered {}", url, status);
      return false;
    }
    if (status == 200 && !tracker.done() && !c->client_gone && continue_elsewhere(c, url, tracker).ok()) {
      c->writer->end();
      finish(*c, 200);
      return true;
    }
    if (std::string rest = tracker.take_rest(); !rest.empty()) c->writer->write(rest);
    c->writer->end();
    finish(*c, c->client_gone && !tracker.done() ? 499 : status);  // a client that leaves after [DONE] got it all
    return true;
  }

  // Decode migration (migration.h): the stream broke on `failed_url`; continue it on another node.
  Status continue_elsewhere(const std::shared_ptr<Call>& c, const std::string& failed_url, StreamTracker& tracker) {
    std::set<std::string> tried = {failed_url};
    MigrationHooks hooks;
    // The continuation may land on a decode node of a PD pair: it then prefills prompt + tokens so far there.
    hooks.pick = [&](const std::set<std::string>& t) { return pick(c->route, t, c->prefill_url); };
    hooks.write = [&](const std::string& bytes) { return c->writer->write(bytes); };
    hooks.client_gone = [&] { return c->client_gone.load(); };
    hooks.exchange = [&](const std::string& url, const std::string& body,
                         const std::function<bool(std::string_view)>& on_chunk) -> Status {
      registry.begin(url, c->reserved_tokens);
      const CancelFlag cancel = begin_attempt(*c, url);
      http::ClientRequest req = upstream_request(*c, url, cancel);
      req.body = body;
      req.headers[std::string(api::kTokenIdsHeader)] = "1";
      int status = 0;
      int64_t generated = 0;
      auto r = http::fetch_streaming(
          req, [&](const http::Response& head) { return (status = head.status) == 200; },
          [&](std::string_view piece) {
            generated += count_events(piece);
            const bool more = !c->client_gone && on_chunk(piece);
            note_tokens(*c, tracker, "");
            return more;
          });
      end_attempt(*c, url, cancel);
      note_outcome(url, c->reserved_tokens, generated, r.ok() ? outcome_of(status) : RequestOutcome::kConnectError);
      if (!r.ok()) return r.status().with_context(url);
      if (status != 200) return unavailable(fmt::format("{} answered {} to the continuation", url, status));
      return ok_status();
    };
    Status s = migrate_stream(tracker, c->body, tried, options.max_attempts, hooks);
    metrics.migration(s.ok());
    return s;
  }

  // ---- handlers -------------------------------------------------------------------------------------------

  void handle_generate(const http::Request& r, const WriterPtr& w, bool chat) {
    auto c = std::make_shared<Call>();
    c->writer = w;
    c->endpoint = chat ? "chat" : "completions";
    c->path = chat ? "/v1/chat/completions" : "/v1/completions";
    c->request_id = api::request_id_of(r.header(std::string(api::kRequestIdHeader)), "rt");
    c->trace = api::trace_of(r.header(std::string(api::kTraceparentHeader)));
    c->remote = r.remote;
    if (!authorized(r, w, c->endpoint)) return;
    auto parsed = api::parse_request(r.body, chat);
    if (auto* e = std::get_if<api::ApiError>(&parsed)) {
      metrics.request_finished(c->endpoint, e->status);
      access_line(*c, e->status);
      return w->send(e->status, api::error_body(*e), "application/json", {{"x-request-id", c->request_id}});
    }
    if (api::has_resume_field(r.body)) {
      metrics.request_finished(c->endpoint, 400);
      access_line(*c, 400);
      return w->send(400,
                     error_json(400, "'tessera_resume' is an internal field and cannot be sent by a client",
                                "invalid_request_error", "internal_field"),
                     "application/json", {{"x-request-id", c->request_id}});
    }
    const api::ApiRequest& req = std::get<api::ApiRequest>(parsed);
    c->model = req.model;
    if (!registry.may_serve(req.model)) return reply_unknown_model(*c);
    c->body = r.body;
    c->stream = req.stream;
    c->include_usage = req.stream && req.include_usage;
    c->session_id = r.header("x-session-id");
    c->token_ids = r.header(api::kTokenIdsHeader) == "1";
    c->internal = http::internal_caller(r, options.cluster_token);
    RouteRequest& route = c->route;
    route.session_id = c->session_id;
    route.user = req.user;
    route.runner = "generate";
    route.model = req.model;
    if (chat) {
      for (const auto& m : req.messages) route.prompt += m.role + "\n" + m.content + "\n";
    } else {
      route.prompt = req.prompt;
    }
    if (req.prompt_is_tokens) {
      route.tokens.assign(req.prompt_tokens.begin(), req.prompt_tokens.end());
    } else if (tokenizes(req.model)) {
      route.tokens = options.tokenize(route.prompt);
    } else {
      // Bytes as pseudo-tokens: stable block hashes for prefix affinity, ~4 bytes per real token for load.
      route.tokens.assign(route.prompt.begin(), route.prompt.end());
    }
    // A node caches a completions prompt's ids as given or as this tokenizer makes them; a chat's are templated.
    route.exact_tokens = req.prompt_is_tokens || (!chat && tokenizes(req.model));
    route.prompt_tokens = tokenizes(req.model) || req.prompt_is_tokens
                              ? static_cast<int64_t>(route.tokens.size())
                              : static_cast<int64_t>(route.prompt.size() / 4 + 1);
    route.max_tokens = req.max_tokens >= 0 ? req.max_tokens : (chat ? 256 : 16);
    // Every prompt of a list is prefilled, and every choice generates (the first prompt stands for the others).
    const int64_t prompts = std::max<int64_t>(1, static_cast<int64_t>(req.prompts.size()));
    c->choices = static_cast<int>(prompts) * req.n;
    c->reserved_tokens = prompts * route.prompt_tokens + c->choices * route.max_tokens;
    // Weak: the writer owns this callback, and the call owns the writer.
    w->on_disconnect([weak = std::weak_ptr<Call>(c)] {
      if (auto call = weak.lock()) call->client_left();
    });
    if (!pool.submit([this, c] { proxy(c); })) {
      reply_error(*c, 503, "the router is overloaded: too many requests waiting", "service_unavailable",
                  "router_overloaded");
    }
  }

  // POST /tokenize and /detokenize (vLLM's routes, serve/tokenize_api.h): the body goes as it is to a node in
  // rotation, which tokenizes with the served model's own tokenizer and validates the body itself.
  // POST /v1/embeddings goes the same way, to a pooling node (serve/embeddings_api.h), retried like any whole answer.
  void handle_tokenizer_route(const http::Request& r, const WriterPtr& w, std::string_view path) {
    auto c = std::make_shared<Call>();
    if (path == "/v1/embeddings") c->route.runner = "pooling";
    c->writer = w;
    c->endpoint = path == "/v1/embeddings" ? "embeddings" : std::string(path.substr(1));
    c->path = std::string(path);
    c->request_id = api::request_id_of(r.header(std::string(api::kRequestIdHeader)), "rt");
    c->trace = api::trace_of(r.header(std::string(api::kTraceparentHeader)));
    c->remote = r.remote;
    if (!authorized(r, w, c->endpoint)) return;
    c->body = r.body;
    c->internal = http::internal_caller(r, options.cluster_token);
    // The body's model picks the nodes, as for completions; the node validates the rest of the body itself.
    if (json j = json::parse(r.body, nullptr, false); j.is_object() && j.contains("model") && j["model"].is_string()) {
      c->model = c->route.model = j["model"].get<std::string>();
      if (!registry.may_serve(c->model)) return reply_unknown_model(*c);
    }
    w->on_disconnect([weak = std::weak_ptr<Call>(c)] {
      if (auto call = weak.lock()) call->client_left();
    });
    if (!pool.submit([this, c] { proxy(c); })) {
      reply_error(*c, 503, "the router is overloaded: too many requests waiting", "service_unavailable",
                  "router_overloaded");
    }
  }

  void handle_models(const WriterPtr& w) {
    auto task = [this, w] {
      const json data = list_models(urls_of(registry.candidates()), {.cluster_token = options.cluster_token,
                                                                     .tls_ca_file = options.upstream_tls_ca_file,
                                                                     .fanout = kModelsFanout});
      if (data.empty()) {
        metrics.request_finished("models", 503);
        return w->send(503, error_json(503, "no node in rotation answered /v1/models", "service_unavailable"));
      }
      metrics.request_finished("models", 200);
      w->send(200, dump({{"object", "list"}, {"data", data}}));
    };
    if (!pool.submit(task)) w->send(503, error_json(503, "the router is overloaded", "service_unavailable"));
  }

  void handle_health(const WriterPtr& w) {
    int healthy = 0, total = 0;
    for (const auto& n : registry.list()) {
      ++total;
      healthy += n.healthy && !n.draining ? 1 : 0;
    }
    json j = {{"status", healthy > 0 ? "ok" : "unavailable"},
              {"strategy", options.strategy},
              {"nodes", total},
              {"nodes_in_rotation", healthy}};
    w->send(healthy > 0 ? 200 : 503, dump(j));
  }

  void add_node(const NodeSpec& spec) {
    if (!registry.add(spec.url, spec.capacity)) return;
    registry.set_role(spec.url, spec.role, spec.host_id);
    registry.set_models(spec.url, spec.models);
    std::lock_guard lock(strategy_mu);
    strategy->on_node_added(spec.url);
  }
  bool remove_node(const std::string& url) {
    if (!registry.remove(url)) return false;
    kv_index.remove_node(url);
    std::lock_guard lock(strategy_mu);
    strategy->on_node_removed(url);
    return true;
  }
};

Result<std::unique_ptr<Gateway>> Gateway::create(GatewayOptions options) {
  TS_ASSIGN_OR_RETURN(auto strategy, builtin_strategies().create(options.strategy, options.strategy_options));
  if (options.workers < 1) return invalid_argument("--workers must be at least 1");
  if (options.max_attempts < 1) return invalid_argument("--max-attempts must be at least 1");
  auto impl = std::make_unique<Impl>(std::move(options), std::move(strategy));
  return std::unique_ptr<Gateway>(new Gateway(std::move(impl)));
}

Gateway::Gateway(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  Impl* d = impl_.get();
  d->server.route("POST", "/v1/completions",
                  [d](const http::Request& r, const WriterPtr& w) { d->handle_generate(r, w, false); });
  d->server.route("POST", "/v1/chat/completions",
                  [d](const http::Request& r, const WriterPtr& w) { d->handle_generate(r, w, true); });
  for (std::string_view path :
       {std::string_view("/tokenize"), std::string_view("/detokenize"), std::string_view("/v1/embeddings")}) {
    d->server.route("POST", std::string(path),
                    [d, path](const http::Request& r, const WriterPtr& w) { d->handle_tokenizer_route(r, w, path); });
  }
  d->server.route("GET", "/v1/models", [d](const http::Request& r, const WriterPtr& w) {
    if (d->authorized(r, w, "models")) d->handle_models(w);
  });
  d->server.route("GET", "/health", [d](const http::Request&, const WriterPtr& w) { d->handle_health(w); });
  d->server.route("GET", "/metrics", [d](const http::Request&, const WriterPtr& w) {
    w->send(200, d->metrics.render(d->registry.list(), d->pool.queued(), d->pool.busy()), "text/plain; version=0.0.4");
  });
  mount_admin_routes(
      d->server,
      {.registry = &d->registry,
       .strategy = d->options.strategy,
       .add_node = [d](const NodeSpec& spec) { d->add_node(spec); },
       .remove_node = [d](const std::string& url) { return d->remove_node(url); },
       .kv_event_blocks = [d](const std::string& url) -> std::optional<std::array<size_t, api::kKvTiers>> {
         if (!d->kv_poller) return std::nullopt;
         return d->kv_index.blocks(url);
       },
       .kv_event_states = [d](const std::string& url) -> std::optional<std::array<size_t, api::kKvTiers>> {
         if (!d->kv_poller) return std::nullopt;
         return d->kv_index.states(url);
       }},
      [d](http::Handler h) { return d->admin(std::move(h)); });
}

Gateway::~Gateway() { stop(); }

Status Gateway::start() {
  TS_RETURN_IF_ERROR(impl_->server.start());
  impl_->prober.start();
  if (impl_->kv_poller) impl_->kv_poller->start();
  return Status();
}

uint16_t Gateway::port() const { return impl_->server.port(); }

void Gateway::stop() {
  if (impl_->stopped.exchange(true)) return;
  if (impl_->kv_poller) impl_->kv_poller->stop();
  impl_->prober.stop();
  impl_->server.stop(2000);
}

void Gateway::on_node_added(const NodeSpec& node) { impl_->add_node(node); }
void Gateway::on_node_removed(const std::string& url) { impl_->remove_node(url); }
void Gateway::on_node_updated(const NodeSpec& node) {
  if (node.capacity > 0) impl_->registry.set_capacity(node.url, node.capacity);
  impl_->registry.set_role(node.url, node.role, node.host_id);
  impl_->registry.set_models(node.url, node.models);
}
NodeRegistry& Gateway::registry() { return impl_->registry; }
LiveStats& Gateway::live_stats() { return impl_->live; }
const GatewayOptions& Gateway::options() const { return impl_->options; }
http::Server& Gateway::http_server() { return impl_->server; }

}  // namespace tessera::router
