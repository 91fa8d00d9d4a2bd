#include "serve/choice_set.h"

namespace tessera::serve {

bool ChoiceSet::finish_choice(int index, nlohmann::json choice, const engine::RequestOutput& last) {
  choices_.at(static_cast<size_t>(index)) = std::move(choice);
  if (index % n_ == 0) {  // each prompt once: its first choice reports it
    prompt_tokens_ += last.prompt_tokens;
    cached_tokens_ += last.cached_tokens;
  }
  completion_tokens_ += last.completion_tokens;
  if (++done_ < total()) return false;
  over_ = true;
  return true;
}

nlohmann::json ChoiceSet::usage() const {
  return {{"prompt_tokens", prompt_tokens_},
          {"completion_tokens", completion_tokens_},
          {"total_tokens", prompt_tokens_ + completion_tokens_},
          {"prompt_tokens_details", {{"cached_tokens", cached_tokens_}}}};
}

nlohmann::json ChoiceSet::choices() const { return nlohmann::json(choices_); }

}  // namespace tessera::serve
