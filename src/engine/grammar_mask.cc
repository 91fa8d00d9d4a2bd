#include "engine/grammar_mask.h"

#include <algorithm>
#include <limits>

namespace tessera::engine {

bool apply_grammar_mask(grammar::Matcher& matcher, std::vector<uint64_t>& words, std::span<float> logits) {
  words.resize(matcher.vocab().mask_words());
  matcher.fill_mask(words);
  constexpr float kNever = -std::numeric_limits<float>::infinity();
  bool any = false;
  const size_t n = logits.size();
  for (size_t w = 0; w * 64 < n; ++w) {
    const uint64_t bits = w < words.size() ? words[w] : 0;
    const size_t end = std::min(n, (w + 1) * 64);
    if (bits == ~uint64_t{0} && end - w * 64 == 64) {
      any = true;
      continue;
    }
    if (bits == 0) {
      std::fill(logits.begin() + static_cast<std::ptrdiff_t>(w * 64), logits.begin() + static_cast<std::ptrdiff_t>(end),
                kNever);
      continue;
    }
    for (size_t t = w * 64; t < end; ++t) {
      if (((bits >> (t % 64)) & 1u) != 0) {
        any = true;
      } else {
        logits[t] = kNever;
      }
    }
  }
  return any;
}

}  // namespace tessera::engine
