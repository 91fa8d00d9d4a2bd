// `tessera route`: the OpenAI-compatible gateway in front of `tessera serve` nodes.
#include <CLI/CLI.hpp>

#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <memory>
#include <string>

#include <fmt/core.h>

#include "auth_flags.h"
#include "commands.h"
#include "ctrl/embedded_server.h"
#include "ctrl/store.h"
#include "model/loader.h"
#include "model/tokenizer/llama2c_tokenizer.h"
#include "router/ctrl_membership.h"
#include "router/dashboard/dashboard.h"
#include "router/gateway.h"
#include "router/membership.h"

namespace tessera::cli {
namespace {

struct RouteArgs {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string nodes;
  std::string ctrl;
  bool ctrl_embedded = false;
  bool no_upstream_keepalive = false;
  bool no_kv_events = false;
  std::string strategy = "round_robin";
  std::vector<std::string> api_keys;
  std::string model;
  std::string tokenizer;
  std::string tokenizer_model;
  int block_size = 16;
  double overload_threshold = 8;
  double prefill_weight = 1;
  int workers = 64;
  int max_attempts = 3;
  int probe_interval_ms = 1000;
  int probe_timeout_ms = 500;
  int unhealthy_threshold = 2;
  int healthy_threshold = 2;
  int consecutive_failures = 3;
  int upstream_timeout_s = 600;
  int io_threads = 2;
  std::vector<std::string> allowed_origins;
  uint64_t seed = 1;
  std::string cluster_token_file;
  std::string tls_cert, tls_key, tls_ca;
  std::string etcd_user, etcd_password_file;
};

int run_route(const RouteArgs& a) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  if (!a.ctrl.empty() && a.ctrl_embedded) {
    return fail("--ctrl (an external control plane) and --ctrl-embedded (one hosted here) exclude each other");
  }
  auto token = cluster_token_from_flag(a.cluster_token_file);
  if (!token.ok()) return fail(token.status().message());
  if (Status s = check_tls_flags(a.tls_cert, a.tls_key); !s.ok()) return fail(s.message());
  auto auth = store_auth_from_flags(*token, a.tls_ca, a.etcd_user, a.etcd_password_file);
  if (!auth.ok()) return fail(auth.status().message());
  const ctrl::StoreAuth store_auth = *auth;
  const bool discovery = !a.ctrl.empty() || a.ctrl_embedded;
  std::vector<router::NodeSpec> nodes;
  if (!a.nodes.empty() || !discovery) {
    auto parsed = router::parse_node_list(a.nodes);
    if (!parsed.ok()) {
      return fail(parsed.status().message() + " (or discover them with --ctrl URL or --ctrl-embedded)");
    }
    nodes = std::move(parsed).value();
  }
  std::unique_ptr<ctrl::Store> store;
  std::unique_ptr<ctrl::Store> dashboard_store;  // the dashboard reads the planner's history with its own client
  if (!a.ctrl.empty()) {
    auto s = ctrl::make_store_from_flag(a.ctrl, store_auth);
    if (!s.ok()) return fail(s.status().message());
    store = std::move(s).value();
    auto d = ctrl::make_store_from_flag(a.ctrl, store_auth);
    if (!d.ok()) return fail(d.status().message());
    dashboard_store = std::move(d).value();
  }

  router::GatewayOptions o;
  o.http.host = a.host;
  o.http.port = static_cast<uint16_t>(a.port);
  o.http.io_threads = a.io_threads;
  auto origins = parse_allowed_origins(a.allowed_origins);
  if (!origins.ok()) return fail(origins.status().message());
  o.http.allowed_origins = *origins;
  o.http.tls_cert_file = a.tls_cert;
  o.http.tls_key_file = a.tls_key;
  o.cluster_token = *token;
  o.upstream_tls_ca_file = a.tls_ca;
  o.strategy = a.strategy;
  o.strategy_options.seed = a.seed;
  o.strategy_options.block_tokens = a.block_size;
  o.strategy_options.overload_threshold = a.overload_threshold;
  o.strategy_options.prefill_weight = a.prefill_weight;
  o.health.probe_interval_ms = a.probe_interval_ms;
  o.health.probe_timeout_ms = a.probe_timeout_ms;
  o.health.unhealthy_threshold = a.unhealthy_threshold;
  o.health.healthy_threshold = a.healthy_threshold;
  o.health.consecutive_failures = a.consecutive_failures;
  o.api_keys = a.api_keys;
  o.workers = a.workers;
  o.max_attempts = a.max_attempts;
  o.upstream_timeout_ms = a.upstream_timeout_s * 1000;
  o.upstream_keepalive = !a.no_upstream_keepalive;
  o.kv_events = !a.no_kv_events;

  std::shared_ptr<model::Tokenizer> tokenizer;
  if (!a.tokenizer.empty()) {
    auto t = model::Llama2cTokenizer::load(a.tokenizer);
    if (!t.ok()) return fail(t.status().message());
    tokenizer = std::move(*t);
  } else if (!a.model.empty()) {
    auto m = model::load_model(a.model);
    if (!m.ok()) return fail(m.status().message());
    tokenizer = std::move(m->tokenizer);
  }
  if (tokenizer) {
    // Nodes encode completions prompts with BOS; hashing the same ids lets the index match their cache.
    o.tokenize = [tokenizer](std::string_view text) {
      std::vector<model::TokenId> ids = tokenizer->encode(text, true);
      return std::vector<int32_t>(ids.begin(), ids.end());
    };
    o.tokenize_model = a.tokenizer_model;
  }

  auto gateway = router::Gateway::create(std::move(o));
  if (!gateway.ok()) return fail(gateway.status().message());
  // Hosted control plane: its /v1/ctrl/ routes live on the router's own port. Declared before the gateway
  // is started and stopped after it (the routes point at it).
  std::unique_ptr<ctrl::EmbeddedServer> hosted;
  if (a.ctrl_embedded) {
    hosted = std::make_unique<ctrl::EmbeddedServer>(SteadyClock::instance(), *token);
    hosted->mount((*gateway)->http_server());
  }
  router::DashboardOptions dopts;
  dopts.api_keys = a.api_keys;
  dopts.cluster_token = *token;
  dopts.tls_ca_file = a.tls_ca;
  router::Dashboard dashboard(**gateway, dopts);
  dashboard.mount((*gateway)->http_server());
  std::vector<std::unique_ptr<router::MembershipSource>> sources;
  if (!nodes.empty()) sources.push_back(router::make_static_membership(nodes));
  for (auto& m : sources) {
    if (Status s = m->start(**gateway); !s.ok()) return fail(s.message());
  }
  if (Status s = (*gateway)->start(); !s.ok()) return fail(s.message());
  const std::string self = fmt::format("{}://{}:{}", a.tls_cert.empty() ? "http" : "https", a.host, (*gateway)->port());
  if (hosted) {
    auto s = ctrl::make_store("embedded", self, store_auth);
    if (!s.ok()) return fail(s.status().message());
    store = std::move(s).value();
    auto d = ctrl::make_store("embedded", self, store_auth);
    if (!d.ok()) return fail(d.status().message());
    dashboard_store = std::move(d).value();
  }
  dashboard.start(std::move(dashboard_store));
  if (store) {
    sources.push_back(router::make_ctrl_membership(std::move(store)));
    if (Status s = sources.back()->start(**gateway); !s.ok()) return fail(s.message());
  }
  warn_if_open(*token, "route", "/admin/* and the control plane");
  if (hosted) std::printf("tessera route: control plane (embedded) at %s\n", self.c_str());
  std::printf("tessera route: dashboard at %s/dashboard\n", self.c_str());
  std::printf("tessera route: %zu nodes%s, strategy %s, listening on %s\n", (*gateway)->registry().list().size(),
              discovery ? " (more from the control plane)" : "", a.strategy.c_str(), self.c_str());
  std::fflush(stdout);

  int sig = 0;
  sigwait(&signals, &sig);
  std::fprintf(stderr, "tessera route: %s received, stopping\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  for (auto& m : sources) m->stop();
  dashboard.stop();
  (*gateway)->stop();
  if (hosted) hosted->stop();
  return 0;
}

}  // namespace

Action add_route_command(CLI::App& app) {
  auto a = std::make_shared<RouteArgs>();
  CLI::App* cmd = app.add_subcommand("route", "Route OpenAI API requests across tessera serve nodes");
  cmd->add_option("--host", a->host, "Listen address")->capture_default_str();
  cmd->add_option("--port", a->port, "Listen port (0: any free port, printed on stdout)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--nodes", a->nodes, "Static nodes: http://host:port[=capacity],... (more via /admin/nodes)");
  cmd->add_option("--ctrl", a->ctrl,
                  "Discover nodes in a control plane: http://host:port (embedded, e.g. `tessera ctrl`) or "
                  "etcd=http://host:port");
  cmd->add_flag("--ctrl-embedded", a->ctrl_embedded,
                "Host the embedded control plane on this router's port (nodes register with --ctrl ROUTER_URL)");
  cmd->add_option("--cluster-token-file", a->cluster_token_file,
                  "The cluster credential (mode 0600): required on /admin/* and the hosted control plane, sent to "
                  "the nodes and an external --ctrl; none: those are open (docs/security.md)");
  cmd->add_option("--tls-cert", a->tls_cert, "Serve HTTPS with this PEM certificate chain (with --tls-key)");
  cmd->add_option("--tls-key", a->tls_key, "PEM private key of --tls-cert");
  cmd->add_option("--etcd-user", a->etcd_user, "--ctrl etcd=...: authenticate as this etcd user");
  cmd->add_option("--etcd-password-file", a->etcd_password_file, "--etcd-user's password (first line of the file)");
  cmd->add_option("--tls-ca", a->tls_ca,
                  "CA file trusted for https:// nodes and control plane (default: the system's)");
  cmd->add_option("--strategy", a->strategy,
                  "round_robin | weighted_random | consistent_hash | least_latency | prefix_cache | kv_aware")
      ->capture_default_str();
  cmd->add_option("--api-key", a->api_keys, "Accepted API key (repeatable); none: no authentication");
  cmd->add_option("--model", a->model, "Model directory whose tokenizer the prefix strategies use");
  cmd->add_option("--tokenizer", a->tokenizer, "Tokenizer file (llama2.c tok*.bin) for the prefix strategies");
  cmd->add_option("--tokenizer-model", a->tokenizer_model,
                  "The served model name --model/--tokenizer belongs to (several models: others hash their bytes)");
  cmd->add_option("--block-size", a->block_size, "Tokens per KV block on the nodes (prefix hashing)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--overload-threshold", a->overload_threshold,
                  "prefix_cache: extra requests in flight on the best match before falling back to the least loaded")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--prefill-weight", a->prefill_weight, "kv_aware: cost per uncached prompt token")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--workers", a->workers, "Upstream requests in flight at most (proxy worker threads)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--max-attempts", a->max_attempts, "Nodes tried per request before giving up")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  cmd->add_option("--probe-interval-ms", a->probe_interval_ms, "Health probe period")
      ->check(CLI::Range(10, 600000))
      ->capture_default_str();
  cmd->add_option("--probe-timeout-ms", a->probe_timeout_ms, "Health probe timeout")
      ->check(CLI::Range(10, 600000))
      ->capture_default_str();
  cmd->add_option("--unhealthy-threshold", a->unhealthy_threshold, "Failed probes in a row that eject a node")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  cmd->add_option("--healthy-threshold", a->healthy_threshold, "Good probes in a row that re-admit a node")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  cmd->add_option("--consecutive-failures", a->consecutive_failures,
                  "Failed requests in a row (connect error or 5xx) that eject a node")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--upstream-timeout", a->upstream_timeout_s, "Seconds an upstream request may take")
      ->check(CLI::Range(1, 86400))
      ->capture_default_str();
  cmd->add_flag("--no-kv-events", a->no_kv_events,
                "prefix_cache, kv_aware: do not read the nodes' KV events (match prompts against the router's own "
                "routing history only)");
  cmd->add_flag("--no-upstream-keepalive", a->no_upstream_keepalive,
                "Open a new connection to the node for every request (default: keep-alive connection pool)");
  cmd->add_option("--io-threads", a->io_threads, "HTTP I/O threads")->check(CLI::Range(1, 64))->capture_default_str();
  cmd->add_option("--allowed-origins", a->allowed_origins,
                  "Origins whose browsers may call the API (CORS): a JSON list as vLLM takes it, or comma-separated; "
                  "* for any (default: none)");
  cmd->add_option("--seed", a->seed, "Seed of weighted_random")->capture_default_str();
  group_options(cmd, "Nodes and membership",
                {"--nodes", "--ctrl", "--ctrl-embedded", "--etcd-user", "--etcd-password-file"});
  group_options(cmd, "Routing",
                {"--strategy", "--model", "--tokenizer", "--tokenizer-model", "--block-size", "--overload-threshold",
                 "--prefill-weight", "--no-kv-events", "--seed"});
  group_options(cmd, "Health and retries",
                {"--probe-interval-ms", "--probe-timeout-ms", "--unhealthy-threshold", "--healthy-threshold",
                 "--consecutive-failures", "--max-attempts", "--upstream-timeout", "--no-upstream-keepalive"});
  group_options(cmd, "HTTP server", {"--host", "--port", "--workers", "--io-threads", "--allowed-origins"});
  group_options(cmd, "Security", {"--cluster-token-file", "--api-key", "--tls-cert", "--tls-key", "--tls-ca"});
  return [a] { return run_route(*a); };
}

}  // namespace tessera::cli
