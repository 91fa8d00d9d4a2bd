#include "serve/embeddings_api.h"

#include <algorithm>
#include <mutex>

#include <fmt/format.h>

#include "api/embeddings.h"
#include "api/headers.h"

namespace tessera::serve {

ops::PoolKind pool_kind(model::PoolingType t) {
  switch (t) {
    case model::PoolingType::kMean:
      return ops::PoolKind::kMean;
    case model::PoolingType::kCls:
      return ops::PoolKind::kFirst;
    default:
      return ops::PoolKind::kLast;
  }
}

Result<EmbeddingServing> resolve_embedding_serving(std::string_view runner, std::string_view pooling, bool matryoshka,
                                                   const model::EmbeddingSpec& spec, const model::ModelConfig& config) {
  if (runner != "auto" && runner != "generate" && runner != "pooling")
    return invalid_argument(fmt::format("--runner '{}' is not one of auto, generate, pooling", runner));
  model::PoolingType chosen = spec.pooling;
  if (!pooling.empty()) {
    TS_ASSIGN_OR_RETURN(chosen, model::parse_pooling(pooling));
  }
  const bool pool =
      runner == "pooling" || (runner == "auto" && (chosen != model::PoolingType::kNone || !config.causal));
  if (!pool) {
    if (!config.causal)
      return invalid_argument(
          fmt::format("{} is an encoder: it serves embeddings only (--runner pooling)", config.arch));
    if (matryoshka) return invalid_argument("--matryoshka applies to embeddings (--runner pooling)");
    return EmbeddingServing{};
  }
  if (chosen == model::PoolingType::kNone)
    return invalid_argument(
        fmt::format("the model's files state no pooling type, so an embedding could not be computed; pass --pooling "
                    "mean, cls or last{}",
                    config.causal ? " (last for a causal model trained for it, as Qwen3-Embedding)" : ""));
  EmbeddingServing s;
  s.enabled = true;
  s.pooling = chosen;
  s.normalize = spec.pooling == model::PoolingType::kNone ? true : spec.normalize;
  s.matryoshka = spec.matryoshka || matryoshka;
  s.matryoshka_dimensions = matryoshka ? std::vector<int>{} : spec.matryoshka_dimensions;
  s.dim = config.dim;
  return s;
}

namespace {

using api::ApiError;

// One embeddings call: its inputs' results gathered until the last one is pooled. Shared by the handler and the
// engine's callbacks (engine thread); `mu` guards everything below it.
struct EmbedCall {
  std::shared_ptr<http::ResponseWriter> writer;
  engine::Engine* engine = nullptr;
  api::EmbeddingRequest req;
  bool normalize = true;
  std::string model;
  std::function<void(int)> finished;
  std::atomic<int>* calls = nullptr;
  std::mutex mu;
  std::vector<std::vector<float>> vectors;
  std::vector<engine::RequestId> ids;
  int remaining = 0;
  int64_t prompt_tokens = 0;
  bool over = false;

  ~EmbedCall() {
    if (calls) --*calls;
  }
  // Ends the call once (mu held): the answer, or an error.
  void end(int status, std::string body) {
    over = true;
    if (finished) finished(status);
    writer->send(status, std::move(body));
  }
  void cancel_all() {
    for (engine::RequestId id : ids) engine->cancel(id);
  }
};

void reply(const EmbeddingsContext& ctx, const std::shared_ptr<http::ResponseWriter>& w, const ApiError& e) {
  if (ctx.finished) ctx.finished(e.status);
  http::Headers h;
  if (e.status == 429) h.emplace("Retry-After", "1");
  w->send(e.status, api::error_body(e), "application/json", h);
}

ApiError bad(std::string message, std::string param = "", std::string code = "") {
  return {400, std::move(message), "invalid_request_error", std::move(param), std::move(code)};
}

}  // namespace

void handle_embeddings(const http::Request& request, std::shared_ptr<http::ResponseWriter> w,
                       const EmbeddingsContext& ctx) {
  if (ctx.draining && ctx.draining->load()) {
    if (ctx.finished) ctx.finished(503);
    return w->send(503, api::error_body({503, "the server is shutting down", "service_unavailable", "", ""}),
                   "application/json", {{std::string(api::kDrainingHeader), "1"}});
  }
  if (!ctx.serving.enabled) {
    return reply(ctx, w,
                 bad(fmt::format("this node serves text generation, not embeddings: start `tessera serve` with "
                                 "--embeddings (--runner pooling) on an embedding model to serve '{}' embeddings",
                                 ctx.model_name),
                     "", "model_not_supported"));
  }
  auto parsed = api::parse_embedding_request(request.body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return reply(ctx, w, *e);
  api::EmbeddingRequest& r = std::get<api::EmbeddingRequest>(parsed);
  if (r.model != ctx.model_name &&
      std::find(ctx.model_aliases.begin(), ctx.model_aliases.end(), r.model) == ctx.model_aliases.end()) {
    return reply(ctx, w,
                 {404, fmt::format("The model '{}' does not exist; this server serves '{}'", r.model, ctx.model_name),
                  "invalid_request_error", "model", "model_not_found"});
  }
  const EmbeddingServing& s = ctx.serving;
  if (r.dimensions) {
    if (!s.matryoshka)
      return reply(ctx, w,
                   bad(fmt::format("the model '{}' does not support matryoshka representations: changing the output "
                                   "dimensions would give poor embeddings (a model declares them with config.json's "
                                   "is_matryoshka / matryoshka_dimensions, or the server with --matryoshka)",
                                   ctx.model_name),
                       "dimensions"));
    if (*r.dimensions > s.dim)
      return reply(ctx, w,
                   bad(fmt::format("'dimensions' {} exceeds the model's embedding size of {}", *r.dimensions, s.dim),
                       "dimensions"));
    const std::vector<int>& allowed = s.matryoshka_dimensions;
    if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), *r.dimensions) == allowed.end())
      return reply(ctx, w,
                   bad(fmt::format("the model '{}' supports only the matryoshka dimensions [{}]", ctx.model_name,
                                   fmt::join(allowed, ", ")),
                       "dimensions"));
  }
  const model::Tokenizer& tok = ctx.engine.tokenizer();
  const model::ModelConfig& cfg = ctx.engine.config();
  std::vector<std::vector<model::TokenId>> prompts;
  prompts.reserve(r.inputs.size());
  int64_t prompt_tokens = 0;
  for (size_t i = 0; i < r.inputs.size(); ++i) {
    const api::EmbeddingInput& in = r.inputs[i];
    std::vector<model::TokenId> ids;
    if (in.is_tokens) {
      for (int64_t id : in.ids) {
        if (id < 0 || id >= cfg.vocab_size)
          return reply(
              ctx, w,
              bad(fmt::format("token id {} in input {} is outside the vocabulary [0, {})", id, i, cfg.vocab_size),
                  "input"));
        ids.push_back(static_cast<model::TokenId>(id));
      }
    } else {
      ids = tok.tokenize(in.text, {.add_special = true, .parse_special = true});
      if (ids.empty()) return reply(ctx, w, bad(fmt::format("input {} tokenizes to nothing", i), "input"));
    }
    if (static_cast<int64_t>(ids.size()) > cfg.max_seq_len)
      return reply(ctx, w,
                   bad(fmt::format("This model's maximum context length is {} tokens. However, you requested {} tokens "
                                   "in input {} for embedding generation. Please reduce the length of the input.",
                                   cfg.max_seq_len, ids.size(), i),
                       "input", "context_length_exceeded"));
    prompt_tokens += static_cast<int64_t>(ids.size());
    prompts.push_back(std::move(ids));
  }
  if (Status st = ctx.engine.admission(); !st.ok()) return reply(ctx, w, api::error_for(st));

  auto call = std::make_shared<EmbedCall>();
  call->writer = w;
  call->engine = &ctx.engine;
  call->normalize = r.normalize.value_or(s.normalize);
  call->model = ctx.model_name;
  call->finished = ctx.finished;
  call->calls = ctx.calls;
  if (call->calls) ++*call->calls;
  call->vectors.resize(prompts.size());
  call->remaining = static_cast<int>(prompts.size());
  call->prompt_tokens = prompt_tokens;
  call->req = std::move(r);
  std::unique_lock<std::mutex> lock(call->mu);  // outputs wait until every input is submitted
  for (size_t i = 0; i < prompts.size(); ++i) {
    engine::GenerationRequest g;
    g.prompt = std::move(prompts[i]);
    g.max_tokens = 1;
    g.pool = pool_kind(s.pooling);
    auto on_output = [call, i](const engine::RequestOutput& o) {
      if (o.finish == engine::FinishReason::kNone) return;
      std::lock_guard<std::mutex> guard(call->mu);
      if (call->over) return;
      if (o.finish != engine::FinishReason::kStop || o.embedding.empty()) {
        // The other inputs are left to finish (their results dropped): a callback must not call into the engine,
        // which may hold its own lock while it reports (at shutdown).
        const Status err = o.finish == engine::FinishReason::kError ? o.error : cancelled("the request was cancelled");
        const ApiError e = api::error_for(err.ok() ? internal_error("an input ended without an embedding") : err);
        return call->end(e.status, api::error_body(e));
      }
      call->vectors[i] = api::shape_embedding(o.embedding, call->req.dimensions, call->normalize);
      if (--call->remaining == 0)
        call->end(200, api::embedding_response(call->model, call->vectors, call->prompt_tokens, call->req.base64));
    };
    auto id = ctx.engine.submit(std::move(g), on_output);
    if (!id.ok()) {
      call->cancel_all();
      const ApiError e = api::error_for(id.status());
      if (e.status == 429) {
        call->over = true;
        lock.unlock();
        return reply(ctx, w, e);
      }
      return call->end(e.status, api::error_body(e));
    }
    call->ids.push_back(*id);
  }
  lock.unlock();
  w->on_disconnect([weak = std::weak_ptr<EmbedCall>(call)] {
    if (auto c = weak.lock()) {
      std::lock_guard<std::mutex> guard(c->mu);
      if (c->over) return;
      c->over = true;
      if (c->finished) c->finished(499);  // the client left before its answer
      c->cancel_all();
    }
  });
}

}  // namespace tessera::serve
