// Engine::submit's checks of a request: what the model and the engine can serve, before anything is queued.
#include <fmt/core.h>

#include "engine/engine.h"

namespace tessera::engine {

Status Engine::check_request(GenerationRequest& request) const {
  TS_RETURN_IF_ERROR(validate(request.sampling));
  const model::ModelConfig& c = runner_.config();
  if (request.pool) {
    TS_RETURN_IF_ERROR(check_embedding(request));
  } else if (!c.causal) {
    return invalid_argument(fmt::format("{} is an encoder: it computes embeddings, not text", c.arch));
  }
  if (request.prompt.empty()) return invalid_argument("the prompt is empty");
  if (request.max_tokens < 1)
    return invalid_argument(fmt::format("max_tokens must be at least 1, got {}", request.max_tokens));
  if (static_cast<int64_t>(request.prompt.size()) >= c.max_seq_len + (request.pool ? 1 : 0)) {
    return invalid_argument(
        fmt::format("the prompt is {} tokens; this model's context is {} tokens, which leaves no room to generate",
                    request.prompt.size(), c.max_seq_len));
  }
  for (TokenId t : request.prompt) {
    if (t < 0 || t >= c.vocab_size)
      return invalid_argument(fmt::format("token id {} is outside the vocabulary [0, {})", t, c.vocab_size));
  }
  for (const std::string& s : request.stop) {
    if (s.empty()) return invalid_argument("stop strings must not be empty");
  }
  if (request.logprobs > 20) return invalid_argument(fmt::format("at most 20 top logprobs, got {}", request.logprobs));
  if (request.prompt_logprobs < -1 || request.prompt_logprobs > 20)
    return invalid_argument(fmt::format("prompt_logprobs must be between 0 and 20, got {}", request.prompt_logprobs));
  if (request.n < 1 || request.n > kMaxChoices)
    return invalid_argument(fmt::format("n must be between 1 and {}, got {}", kMaxChoices, request.n));
  if (request.sampling.min_tokens > request.max_tokens)
    return invalid_argument(fmt::format("min_tokens ({}) must not exceed max_tokens ({})", request.sampling.min_tokens,
                                        request.max_tokens));
  for (const auto& [id, bias] : request.sampling.logit_bias) {
    if (id >= c.vocab_size)
      return invalid_argument(
          fmt::format("logit_bias names token id {}, outside the vocabulary [0, {})", id, c.vocab_size));
  }
  if (!request.grammar) request.grammar_replay = 0;
  if (request.grammar_replay < 0 || request.grammar_replay >= static_cast<int>(request.prompt.size())) {
    return invalid_argument(fmt::format("grammar_replay {} is outside the prompt's {} tokens", request.grammar_replay,
                                        request.prompt.size()));
  }
  return ok_status();
}

Status Engine::check_embedding(const GenerationRequest& r) const {
  if (r.n != 1 || r.logprobs >= 0 || r.prompt_logprobs >= 0 || r.kv_transfer)
    return invalid_argument("an embedding request has one choice, no logprobs and no KV transfer");
  const int budget = options_.scheduler.max_batch_tokens;
  if (!runner_.config().causal && static_cast<int>(r.prompt.size()) > budget) {
    return invalid_argument(
        fmt::format("the input is {} tokens; this encoder computes an input in one step of at most {} tokens "
                    "(--max-batch-tokens)",
                    r.prompt.size(), budget));
  }
  return ok_status();
}

}  // namespace tessera::engine
