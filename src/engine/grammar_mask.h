// The sampler's side of structured output: a sequence's grammar matcher turned into a logits mask.
//
// Thread-safety: functions over caller-owned state (the engine thread's).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "grammar/matcher.h"

namespace tessera::engine {

// Sets the logits of tokens the matcher does not allow next to -infinity (tokens beyond the tokenizer's
// vocabulary too); false when it allows none. `words` is scratch space, reused between calls.
bool apply_grammar_mask(grammar::Matcher& matcher, std::vector<uint64_t>& words, std::span<float> logits);

}  // namespace tessera::engine
