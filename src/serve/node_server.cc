#include "serve/node_server.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "base/log.h"
#include "serve/metrics.h"

namespace tessera::serve {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

ApiError from_status(const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
      return {400, s.message(), "invalid_request_error", "", ""};
    case StatusCode::kResourceExhausted:
      return {429, s.message(), "rate_limit_error", "", "server_busy"};
    case StatusCode::kUnavailable:
    case StatusCode::kCancelled:
      return {503, s.message(), "service_unavailable", "", ""};
    default:
      return {500, s.message(), "server_error", "", ""};
  }
}

// The state of one API call, shared by the handler and the engine callback.
struct Call {
  std::shared_ptr<http::ResponseWriter> writer;
  ApiRequest req;
  std::string id;
  int64_t created = 0;
  std::string model;
  Clock::time_point start, last;
  bool first_token = true;
  bool role_sent = false;
  std::string text;  // non-streaming accumulation
  std::vector<engine::TokenLogprobs> logprobs;
  std::vector<std::string> token_texts;
  size_t text_offset = 0;  // completions logprobs: running byte offset
};

json token_logprob_entry(const std::string& token_text, float logprob, const model::Tokenizer& tok,
                         const engine::TokenLogprobs* top, model::TokenId prev) {
  json bytes = json::array();
  for (unsigned char c : token_text) bytes.push_back(static_cast<int>(c));
  json e = {{"token", token_text}, {"logprob", logprob}, {"bytes", bytes}};
  if (top) {
    json tops = json::array();
    for (const auto& [id, lp] : top->top) {
      std::string t = tok.decode_piece(prev, id);
      json b = json::array();
      for (unsigned char c : t) b.push_back(static_cast<int>(c));
      tops.push_back({{"token", t}, {"logprob", lp}, {"bytes", b}});
    }
    e["top_logprobs"] = tops;
  }
  return e;
}

}  // namespace

struct NodeServer::Impl {
  engine::Engine& engine;
  NodeOptions options;
  http::Server server;
  Metrics metrics;
  std::atomic<bool> draining{false};
  std::atomic<uint64_t> next_id{1};

  Impl(engine::Engine& e, NodeOptions o)
      : engine(e), options(std::move(o)), server(options.http), metrics(options.model_name) {}

  void reply_error(const std::shared_ptr<http::ResponseWriter>& w, std::string_view endpoint, const ApiError& e) {
    metrics.request_finished(endpoint, e.status);
    w->send(e.status, error_body(e));
  }

  json logprobs_json(Call& c, const std::vector<engine::TokenLogprobs>& lps, const std::vector<std::string>& texts) {
    const model::Tokenizer& tok = engine.tokenizer();
    if (c.req.chat) {
      json content = json::array();
      for (size_t i = 0; i < lps.size(); ++i) {
        content.push_back(token_logprob_entry(texts[i], lps[i].logprob, tok, &lps[i], lps[i].token));
      }
      return {{"content", content}};
    }
    json tokens = json::array(), token_lps = json::array(), tops = json::array(), offsets = json::array();
    for (size_t i = 0; i < lps.size(); ++i) {
      tokens.push_back(texts[i]);
      token_lps.push_back(lps[i].logprob);
      json t = json::object();
      for (const auto& [id, lp] : lps[i].top) t[tok.decode_piece(lps[i].token, id)] = lp;
      tops.push_back(t);
      offsets.push_back(c.text_offset);
      c.text_offset += texts[i].size();
    }
    return {{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
  }

  json chunk(const Call& c, json choice) {
    return {{"id", c.id},
            {"object", c.req.chat ? "chat.completion.chunk" : "text_completion"},
            {"created", c.created},
            {"model", c.model},
            {"choices", json::array({std::move(choice)})}};
  }

  static json usage(const engine::RequestOutput& o) {
    return {{"prompt_tokens", o.prompt_tokens},
            {"completion_tokens", o.completion_tokens},
            {"total_tokens", o.prompt_tokens + o.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", o.cached_tokens}}}};
  }

  void on_output(const std::shared_ptr<Call>& c, const engine::RequestOutput& o) {
    const auto now = Clock::now();
    const std::string_view endpoint = c->req.chat ? "chat" : "completions";
    if (!o.tokens.empty()) {
      if (c->first_token) {
        metrics.time_to_first_token(seconds(c->start, now));
        c->first_token = false;
      } else {
        metrics.inter_token(seconds(c->last, now), static_cast<int>(o.tokens.size()));
      }
      c->last = now;
    }
    const bool done = o.finish != engine::FinishReason::kNone;
    if (c->req.stream) {
      stream_output(*c, o);
    } else {
      c->text += o.text;
      c->logprobs.insert(c->logprobs.end(), o.logprobs.begin(), o.logprobs.end());
      c->token_texts.insert(c->token_texts.end(), o.token_texts.begin(), o.token_texts.end());
    }
    if (!done) return;
    metrics.request_latency(seconds(c->start, now));
    if (o.finish == engine::FinishReason::kCancelled) {
      metrics.request_finished(endpoint, 499);
      if (!c->req.stream)
        c->writer->send(503, error_body({503, "the request was cancelled: the server is shutting down",
                                         "service_unavailable", "", ""}));
      else
        c->writer->end();
      return;
    }
    if (o.finish == engine::FinishReason::kError) {
      ApiError e = from_status(o.error);
      metrics.request_finished(endpoint, e.status);
      if (c->req.stream) {
        c->writer->write("data: " + error_body(e) + "\n\n");
        c->writer->write("data: [DONE]\n\n");
        c->writer->end();
      } else {
        c->writer->send(e.status, error_body(e));
      }
      return;
    }
    metrics.request_finished(endpoint, 200);
    const std::string reason(engine::finish_reason_name(o.finish));
    if (c->req.stream) {
      json final_choice =
          c->req.chat ? json{{"index", 0}, {"delta", json::object()}, {"logprobs", nullptr}, {"finish_reason", reason}}
                      : json{{"index", 0}, {"text", ""}, {"logprobs", nullptr}, {"finish_reason", reason}};
      c->writer->write("data: " + dump(chunk(*c, final_choice)) + "\n\n");
      if (c->req.include_usage) {
        json u = chunk(*c, json());
        u["choices"] = json::array();
        u["usage"] = usage(o);
        c->writer->write("data: " + dump(u) + "\n\n");
      }
      c->writer->write("data: [DONE]\n\n");
      c->writer->end();
      return;
    }
    json lp = c->req.generation.logprobs >= 0 ? logprobs_json(*c, c->logprobs, c->token_texts) : json(nullptr);
    json choice = c->req.chat ? json{{"index", 0},
                                     {"message", {{"role", "assistant"}, {"content", c->text}}},
                                     {"logprobs", lp},
                                     {"finish_reason", reason}}
                              : json{{"index", 0}, {"text", c->text}, {"logprobs", lp}, {"finish_reason", reason}};
    json body = {{"id", c->id},
                 {"object", c->req.chat ? "chat.completion" : "text_completion"},
                 {"created", c->created},
                 {"model", c->model},
                 {"choices", json::array({choice})},
                 {"usage", usage(o)}};
    c->writer->send(200, dump(body));
  }

  void stream_output(Call& c, const engine::RequestOutput& o) {
    if (c.req.chat && !c.role_sent) {
      c.role_sent = true;
      c.writer->write("data: " +
                      dump(chunk(c, {{"index", 0},
                                     {"delta", {{"role", "assistant"}, {"content", ""}}},
                                     {"logprobs", nullptr},
                                     {"finish_reason", nullptr}})) +
                      "\n\n");
    }
    if (o.text.empty() && o.logprobs.empty()) return;
    json lp = c.req.generation.logprobs >= 0 && !o.logprobs.empty() ? logprobs_json(c, o.logprobs, o.token_texts)
                                                                    : json(nullptr);
    json choice =
        c.req.chat ? json{{"index", 0}, {"delta", {{"content", o.text}}}, {"logprobs", lp}, {"finish_reason", nullptr}}
                   : json{{"index", 0}, {"text", o.text}, {"logprobs", lp}, {"finish_reason", nullptr}};
    c.writer->write("data: " + dump(chunk(c, choice)) + "\n\n");
  }

  void handle_generate(const http::Request& hreq, std::shared_ptr<http::ResponseWriter> w, bool chat) {
    const std::string_view endpoint = chat ? "chat" : "completions";
    if (draining) return reply_error(w, endpoint, {503, "the server is shutting down", "service_unavailable", "", ""});
    auto parsed = parse_request(hreq.body, chat);
    if (auto* e = std::get_if<ApiError>(&parsed)) return reply_error(w, endpoint, *e);
    auto call = std::make_shared<Call>();
    call->req = std::move(std::get<ApiRequest>(parsed));
    ApiRequest& r = call->req;
    if (r.model != options.model_name) {
      return reply_error(
          w, endpoint,
          {404, fmt::format("The model '{}' does not exist; this server serves '{}'", r.model, options.model_name),
           "invalid_request_error", "model", "model_not_found"});
    }
    const model::Tokenizer& tok = engine.tokenizer();
    const model::ModelConfig& cfg = engine.config();
    std::string prompt_text;
    if (chat) {
      if (!options.chat) {
        return reply_error(
            w, endpoint,
            {400, "this model has no chat template; start the server with --chat-template, or use /v1/completions",
             "invalid_request_error", "messages", ""});
      }
      auto formatted = options.chat(r.messages);
      if (!formatted.ok())
        return reply_error(w, endpoint, {400, formatted.status().message(), "invalid_request_error", "messages", ""});
      prompt_text = *formatted;
      r.generation.prompt = tok.encode(prompt_text, true);
    } else if (r.prompt_is_tokens) {
      r.generation.prompt = r.prompt_tokens;
    } else {
      prompt_text = r.prompt;
      r.generation.prompt = tok.encode(prompt_text, true);
    }
    const int prompt_len = static_cast<int>(r.generation.prompt.size());
    if (prompt_len >= cfg.max_seq_len) {
      return reply_error(w, endpoint,
                         {400,
                          fmt::format("This model's maximum context length is {} tokens. However, your prompt is {} "
                                      "tokens, which leaves no room for the completion.",
                                      cfg.max_seq_len, prompt_len),
                          "invalid_request_error", chat ? "messages" : "prompt", "context_length_exceeded"});
    }
    int max_tokens = r.max_tokens >= 0 ? r.max_tokens : (chat ? cfg.max_seq_len - prompt_len : 16);
    if (prompt_len + max_tokens > cfg.max_seq_len) {
      return reply_error(
          w, endpoint,
          {400,
           fmt::format("This model's maximum context length is {} tokens. However, you requested {} tokens ({} in the "
                       "prompt, {} for the completion). Please reduce the prompt or max_tokens.",
                       cfg.max_seq_len, prompt_len + max_tokens, prompt_len, max_tokens),
           "invalid_request_error", "max_tokens", "context_length_exceeded"});
    }
    r.generation.max_tokens = max_tokens;
    call->writer = w;
    call->model = options.model_name;
    call->created = unix_now();
    call->start = call->last = Clock::now();
    call->id = fmt::format("{}-{:016x}", chat ? "chatcmpl" : "cmpl", next_id++);
    std::string echo_text = (!chat && r.echo) ? (r.prompt_is_tokens ? tok.decode(r.prompt_tokens) : r.prompt) : "";

    if (r.stream) {
      http::Headers h;
      h.emplace("X-Request-Id", hreq.header("x-request-id").empty() ? call->id : hreq.header("x-request-id"));
      w->start_stream(200, "text/event-stream", h);
      if (!echo_text.empty()) {
        w->write(
            "data: " +
            dump(chunk(*call, {{"index", 0}, {"text", echo_text}, {"logprobs", nullptr}, {"finish_reason", nullptr}})) +
            "\n\n");
      }
    } else {
      call->text = echo_text;
    }
    auto on_out = [this, call](const engine::RequestOutput& o) { on_output(call, o); };
    if (options.pd != nullptr && options.pd->options().role == "decode") {
      // The PD path decides where the prompt is prefilled and hands the request to the engine later.
      struct Handle {
        std::mutex mu;
        std::optional<engine::RequestId> id;
        bool gone = false;
      };
      auto handle = std::make_shared<Handle>();
      auto cancelled = std::make_shared<std::atomic<bool>>(false);
      engine::Engine* eng = &engine;
      w->on_disconnect([eng, handle, cancelled] {
        *cancelled = true;
        std::lock_guard<std::mutex> lock(handle->mu);
        handle->gone = true;
        if (handle->id) eng->cancel(*handle->id);
      });
      options.pd->generate(
          std::move(r.generation), on_out,
          [this, eng, handle, call, endpoint](Result<engine::RequestId> id) {
            if (!id.ok()) return fail_submit(call, endpoint, id.status());
            std::lock_guard<std::mutex> lock(handle->mu);
            handle->id = *id;
            if (handle->gone) eng->cancel(*id);
          },
          cancelled);
      return;
    }
    auto id = engine.submit(r.generation, on_out);
    if (!id.ok()) return fail_submit(call, endpoint, id.status());
    engine::Engine* eng = &engine;
    w->on_disconnect([eng, rid = *id] { eng->cancel(rid); });
  }

  void fail_submit(const std::shared_ptr<Call>& call, std::string_view endpoint, const Status& status) {
    const std::shared_ptr<http::ResponseWriter>& w = call->writer;
    {
      ApiError e = from_status(status);
      metrics.request_finished(endpoint, e.status);
      if (call->req.stream) {
        w->write("data: " + error_body(e) + "\n\n");
        w->write("data: [DONE]\n\n");
        w->end();
      } else {
        w->send(e.status, error_body(e));
      }
    }
  }
};

NodeServer::NodeServer(engine::Engine& engine, NodeOptions options)
    : impl_(std::make_unique<Impl>(engine, std::move(options))) {
  Impl* d = impl_.get();
  d->server.route("POST", "/v1/completions", [d](const http::Request& r, std::shared_ptr<http::ResponseWriter> w) {
    d->handle_generate(r, std::move(w), false);
  });
  d->server.route("POST", "/v1/chat/completions", [d](const http::Request& r, std::shared_ptr<http::ResponseWriter> w) {
    d->handle_generate(r, std::move(w), true);
  });
  d->server.route("GET", "/v1/models", [d](const http::Request&, std::shared_ptr<http::ResponseWriter> w) {
    json m = {{"id", d->options.model_name},
              {"object", "model"},
              {"created", unix_now()},
              {"owned_by", "tessera"},
              {"max_model_len", d->engine.config().max_seq_len},
              {"vocab_size", d->engine.config().vocab_size}};  // an extension: lets load generators send token ids
    w->send(200, dump({{"object", "list"}, {"data", json::array({m})}}));
  });
  d->server.route("GET", "/health", [d](const http::Request&, std::shared_ptr<http::ResponseWriter> w) {
    if (d->draining) return w->send(503, R"({"status":"draining"})");
    engine::EngineStats s = d->engine.stats();
    w->send(200, dump({{"status", "ok"},
                       {"model", d->options.model_name},
                       {"waiting", s.waiting},
                       {"running", s.running},
                       {"kv_blocks_used", s.kv_blocks_used},
                       {"kv_blocks_total", s.kv_blocks_total}}));
  });
  d->server.route("GET", "/metrics", [d](const http::Request&, std::shared_ptr<http::ResponseWriter> w) {
    std::string text = d->metrics.render(d->engine.stats());
    if (d->options.pd != nullptr) {
      PdStats p = d->options.pd->stats();
      text += fmt::format(
          "# HELP tessera_pd_requests_total Requests by where their prompt was prefilled\n"
          "# TYPE tessera_pd_requests_total counter\n"
          "tessera_pd_requests_total{{path=\"remote\"}} {}\ntessera_pd_requests_total{{path=\"local\"}} {}\n"
          "tessera_pd_requests_total{{path=\"fallback\"}} {}\n"
          "# HELP tessera_pd_kv_bytes_total KV bytes received from prefill nodes\n# TYPE tessera_pd_kv_bytes_total "
          "counter\n"
          "tessera_pd_kv_bytes_total {}\n"
          "# HELP tessera_pd_checksum_mismatches_total KV transfers rejected by their checksum\n"
          "# TYPE tessera_pd_checksum_mismatches_total counter\ntessera_pd_checksum_mismatches_total {}\n"
          "# HELP tessera_pd_transfer_seconds_total Time from asking a prefill node to holding its KV\n"
          "# TYPE tessera_pd_transfer_seconds_total counter\ntessera_pd_transfer_seconds_total {}\n"
          "# HELP tessera_pd_prefill_compute_seconds_total Prefill node time computing remote prompts\n"
          "# TYPE tessera_pd_prefill_compute_seconds_total counter\ntessera_pd_prefill_compute_seconds_total {}\n"
          "# HELP tessera_pd_kv_exposed_seconds_total KV transfer time not hidden behind prefill compute\n"
          "# TYPE tessera_pd_kv_exposed_seconds_total counter\ntessera_pd_kv_exposed_seconds_total {}\n"
          "# HELP tessera_pd_kv_active_seconds_total First KV write issued to last completed, per request\n"
          "# TYPE tessera_pd_kv_active_seconds_total counter\ntessera_pd_kv_active_seconds_total {}\n"
          "# HELP tessera_pd_kv_verify_seconds_total Checksumming and copying received KV out of staging\n"
          "# TYPE tessera_pd_kv_verify_seconds_total counter\ntessera_pd_kv_verify_seconds_total {}\n",
          p.remote, p.local, p.fallbacks, p.kv_bytes, p.checksum_mismatches, p.transfer_seconds,
          p.prefill_compute_seconds, p.kv_exposed_seconds, p.kv_active_seconds, p.kv_verify_seconds);
    }
    w->send(200, text, "text/plain; version=0.0.4");
  });
  if (d->options.pd != nullptr) d->options.pd->register_routes(d->server);
}

NodeServer::~NodeServer() { stop(0); }

Status NodeServer::start() { return impl_->server.start(); }
uint16_t NodeServer::port() const { return impl_->server.port(); }

void NodeServer::stop(int grace_ms) {
  impl_->draining = true;
  impl_->server.stop(grace_ms);
}

}  // namespace tessera::serve
