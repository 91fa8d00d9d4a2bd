#include "engine/logits_processors.h"

#include <algorithm>
#include <limits>

namespace tessera::engine {

LogitsProcessors::LogitsProcessors(const api::SamplingParams& params, std::span<const model::TokenId> prompt,
                                   std::vector<model::TokenId> stop_tokens)
    : min_tokens_(params.min_tokens),
      bias_(params.logit_bias),
      repetition_(params.repetition_penalty),
      frequency_(params.frequency_penalty),
      presence_(params.presence_penalty) {
  if (min_tokens_ > 0) {
    std::sort(stop_tokens.begin(), stop_tokens.end());
    stop_tokens.erase(std::unique(stop_tokens.begin(), stop_tokens.end()), stop_tokens.end());
    stop_tokens_ = std::move(stop_tokens);
  }
  if (repetition_ != 1.0f) {
    std::vector<model::TokenId> set(prompt.begin(), prompt.end());
    std::sort(set.begin(), set.end());
    set.erase(std::unique(set.begin(), set.end()), set.end());
    prompt_set_ = std::make_shared<const std::vector<model::TokenId>>(std::move(set));
  }
}

void LogitsProcessors::apply(std::span<float> logits, const std::unordered_map<model::TokenId, int>& counts,
                             int generated) const {
  const auto in_vocab = [&](model::TokenId id) { return id >= 0 && static_cast<size_t>(id) < logits.size(); };
  if (generated < min_tokens_) {
    for (model::TokenId id : stop_tokens_)
      if (in_vocab(id)) logits[static_cast<size_t>(id)] = -std::numeric_limits<float>::infinity();
  }
  for (const auto& [id, b] : bias_)
    if (in_vocab(id)) logits[static_cast<size_t>(id)] += b;
  if (repetition_ != 1.0f) {
    const auto penalise = [&](model::TokenId id) {
      float& x = logits[static_cast<size_t>(id)];
      x = x > 0.0f ? x / repetition_ : x * repetition_;
    };
    for (model::TokenId id : *prompt_set_)
      if (in_vocab(id)) penalise(id);
    for (const auto& [id, count] : counts) {
      if (count <= 0 || !in_vocab(id) || std::binary_search(prompt_set_->begin(), prompt_set_->end(), id)) continue;
      penalise(id);
    }
  }
  if (frequency_ != 0.0f || presence_ != 0.0f) {
    for (const auto& [id, count] : counts) {
      if (count <= 0 || !in_vocab(id)) continue;
      logits[static_cast<size_t>(id)] -= presence_ + frequency_ * static_cast<float>(count);
    }
  }
}

}  // namespace tessera::engine
