// NodeServer (node_server.h): its routes, how a call ends (metric, access line, error answers), and the drain.
// A generation request is handled in node_server_generate.cc and answered in node_server_output.cc.
#include "serve/node_server.h"

#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <thread>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "api/headers.h"
#include "api/health.h"
#include "base/log.h"
#include "serve/internal/node_server_impl.h"
#include "serve/kv_events_api.h"
#include "serve/role_admin.h"
#include "serve/tokenize_api.h"

namespace tessera::serve {

using json = nlohmann::json;
using api::ApiError;
using api::error_body;
using internal::Clock;
using internal::dump;
using internal::unix_now;

void NodeServer::Impl::on_template_pool(
    const http::Request& r, std::shared_ptr<http::ResponseWriter> w, std::string_view endpoint,
    std::function<void(const http::Request&, std::shared_ptr<http::ResponseWriter>)> work) {
  auto req = std::make_shared<http::Request>(r);
  if (!template_pool.submit([req, w, work = std::move(work)] {
        // Renders yield the CPU to the io threads and the engine: a hostile template spins up to its budget.
        static thread_local const bool lowered = setpriority(PRIO_PROCESS, gettid(), 10) == 0;
        (void)lowered;
        if (w->client_gone()) return;  // left while queued: nothing to render for
        work(*req, w);
      })) {
    reply_error(w, endpoint, nullptr,
                {503, "too many chat templates are being rendered; retry shortly", "service_unavailable", "", ""});
  }
}

void NodeServer::Impl::ended(std::string_view endpoint, int status, const RequestTag* tag, const ChoiceSet* set) {
  metrics.request_finished(endpoint, status);
  if (tag == nullptr) return;
  int64_t prompt = -1, completion = -1;
  if (set != nullptr && status == 200) {
    const json u = set->usage();
    prompt = u.value("prompt_tokens", int64_t{-1});
    completion = u.value("completion_tokens", int64_t{-1});
  }
  log::access({.method = "POST",
               .route = tag->route,
               .model = tag->model,
               .status = status,
               .prompt_tokens = prompt,
               .completion_tokens = completion,
               .ttft_ms = tag->ttft_ms,
               .total_ms = tag->elapsed_ms(),
               .request_id = tag->request_id,
               .trace_id = tag->trace.trace_id,
               .remote = tag->remote});
}

void NodeServer::Impl::reply_error(const std::shared_ptr<http::ResponseWriter>& w, std::string_view endpoint,
                                   const RequestTag* tag, const ApiError& e) {
  ended(endpoint, e.status, tag);
  http::Headers h;
  if (e.status == 429) h.emplace("Retry-After", "1");
  w->send(e.status, error_body(e), "application/json", h);
}

NodeServer::NodeServer(engine::Engine& engine, NodeOptions options)
    : impl_(std::make_unique<Impl>(engine, std::move(options))) {
  Impl* d = impl_.get();
  // /v1/*: an API key (when configured) or the cluster token (the router forwarding for its own clients).
  auto keyed = [d](http::Handler h) -> http::Handler {
    if (d->options.api_keys.empty()) return h;
    return [d, h = std::move(h)](const http::Request& r, std::shared_ptr<http::ResponseWriter> w) {
      if (!http::api_key_matches(http::bearer_token(r), d->options.api_keys) &&
          !http::presents_cluster_token(r, d->options.cluster_token)) {
        return w->send(401, R"({"error":{"message":"Incorrect API key provided: send Authorization: Bearer KEY",)"
                            R"("type":"invalid_request_error","param":null,"code":"invalid_api_key"}})");
      }
      h(r, std::move(w));
    };
  };
  d->server.route("POST", "/v1/completions",
                  keyed([d](const http::Request& r, std::shared_ptr<http::ResponseWriter> w) {
                    d->handle_generate(r, std::move(w), false);
                  }));
  d->server.route(
      "POST", "/v1/chat/completions", keyed([d](const http::Request& r, std::shared_ptr<http::ResponseWriter> w) {
        d->on_template_pool(r, std::move(w), "chat",
                            [d](const http::Request& r, auto w) { d->handle_generate(r, std::move(w), true); });
      }));
  d->server.route(
      "POST", "/v1/embeddings", keyed([d](const http::Request& r, std::shared_ptr<http::ResponseWriter> w) {
        handle_embeddings(
            r, std::move(w),
            {d->engine, d->options.embeddings, d->options.model_name, d->options.model_aliases,
             [d](int status) { d->metrics.request_finished("embeddings", status); }, &d->calls, &d->draining});
      }));
  // vLLM's tokenizer routes (serve/tokenize_api.h); public, behind the API key like /v1/*.
  d->server.route("POST", "/tokenize", keyed([d](const http::Request& r, std::shared_ptr<http::ResponseWriter> w) {
                    d->on_template_pool(r, std::move(w), "tokenize", [d](const http::Request& r, auto w) {
                      TokenizeReply t =
                          tokenize_request(r.body, d->engine.tokenizer(), d->options.chat, d->options.served_names(),
                                           d->engine.config().max_seq_len, [&w] { return w->client_gone(); });
                      w->send(t.status, t.body);
                    });
                  }));
  d->server.route("POST", "/detokenize", keyed([d](const http::Request& r, std::shared_ptr<http::ResponseWriter> w) {
                    TokenizeReply t = detokenize_request(r.body, d->engine.tokenizer(), d->options.served_names());
                    w->send(t.status, t.body);
                  }));
  d->server.route("GET", "/v1/models", keyed([d](const http::Request&, std::shared_ptr<http::ResponseWriter> w) {
                    json data = json::array();
                    for (const std::string& name : d->options.served_names()) {
                      data.push_back({{"id", name},
                                      {"object", "model"},
                                      {"created", unix_now()},
                                      {"owned_by", "tessera"},
                                      {"root", d->options.model_name},
                                      {"max_model_len", d->engine.config().max_seq_len},
                                      // an extension: lets load generators send token ids
                                      {"vocab_size", d->engine.config().vocab_size}});
                    }
                    w->send(200, dump({{"object", "list"}, {"data", data}}));
                  }));
  d->server.route("GET", "/health", [d](const http::Request&, std::shared_ptr<http::ResponseWriter> w) {
    if (d->draining) {
      return w->send(503, std::string(api::kDrainingHealthBody), "application/json",
                     {{std::string(api::kDrainingHeader), "1"}});
    }
    engine::EngineStats s = d->engine.stats();
    w->send(200, api::health_body({d->options.model_name, d->options.served_names(), d->options.backend,
                                   d->options.device, s.waiting, s.running, s.kv_blocks_used, s.kv_blocks_total,
                                   std::string(d->options.embeddings.runner())}));
  });
  d->server.route("GET", "/metrics", [d](const http::Request&, std::shared_ptr<http::ResponseWriter> w) {
    const engine::EngineStats stats = d->engine.stats();
    std::optional<PdStats> pd;
    std::string role;
    if (d->options.pd != nullptr) {
      pd = d->options.pd->stats();
      role = d->options.pd->role();
    }
    const std::string text = d->metrics.render(stats, d->engine.connector_stats(), pd ? &*pd : nullptr, role);
    w->send(200, text, "text/plain; version=0.0.4");
  });
  if (d->options.pd != nullptr) d->options.pd->register_routes(d->server);
  add_kv_events_route(d->server, d->engine.kv_events(), d->engine.block_tokens(), d->options.cluster_token);
  register_role_routes(
      d->server, {d->options.pd, [d] { return d->calls.load(); }, d->options.on_role_change, d->options.cluster_token});
}

NodeServer::~NodeServer() { stop(0); }

Status NodeServer::start() { return impl_->server.start(); }
uint16_t NodeServer::port() const { return impl_->server.port(); }

void NodeServer::stop(int grace_ms) {
  // Draining: keep listening (so /health says "draining" rather than refusing, which a router would take for
  // a dead node and cancel its streams) and answer new calls 503 until the calls in flight are over.
  impl_->draining = true;
  const auto deadline = Clock::now() + std::chrono::milliseconds(std::max(0, grace_ms));
  while (impl_->calls.load() > 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  impl_->server.stop(static_cast<int>(std::max<int64_t>(0, left)));
}

}  // namespace tessera::serve
