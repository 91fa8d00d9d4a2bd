// Sampler: turns a row of logits into the next token.
//
// The logits arrive processed (engine/logits_processors.h: min_tokens, logit_bias, penalties). Temperature 0
// is greedy (the first maximum). Otherwise logits are divided by the temperature, softmaxed, cut to tokens
// with at least min_p times the top probability, to the top_k most likely, and to the smallest set whose
// mass exceeds top_p, and one token is drawn with a seeded generator (a random seed when the request gives
// none; 0 is a seed like any other). With min_p = 0 and top_k = 0 the draw is the one llama2.c's run.c makes
// (same generator, same cut-off rule), so a seed reproduces its choices.
//
// Thread-safety: a Sampler holds its generator's state; use one per sequence.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "api/sampling.h"
#include "base/rng.h"
#include "base/status.h"
#include "model/tokenizer/tokenizer.h"

namespace tessera::engine {

// The one definition lives with the wire contract (api/sampling.h): the router and both PD nodes read the
// same struct the sampler does.
using SamplingParams = api::SamplingParams;
using api::validate;

// log-probabilities of the chosen token and the most likely alternatives at one step.
struct TokenLogprobs {
  model::TokenId token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<model::TokenId, float>> top;  // most likely first
  int rank = 0;  // prompt logprobs: 1 + how many tokens were more likely (0: not computed)
};

// log_softmax(logits)[token] and the `top` largest entries.
TokenLogprobs compute_logprobs(std::span<const float> logits, model::TokenId token, int top);

// softmax(logits / temperature) in place (temperature > 0): the probabilities Sampler::sample draws from.
void softmax(std::span<float> logits, float temperature);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  uint64_t seed() const { return seed_; }
  // `logits` is modified (scaled and turned into probabilities in place).
  model::TokenId sample(std::span<float> logits);
  // Consumes the random draw of one sample() without sampling: a decode node continuing from a token its
  // prefill node drew keeps the same random sequence as a single node would.
  void skip_draw() {
    if (params_.temperature != 0.0f) (void)rng_.next_f32();
  }

 private:
  SamplingParams params_;
  uint64_t seed_;
  Rng rng_;
  struct Candidate {
    Candidate() {}  // left unset: a resize over a vocabulary's worth of them writes nothing
    Candidate(float p, int32_t i) : prob(p), index(i) {}
    float prob;
    int32_t index;
  };
  // The candidates and the radix sort's second buffer live one pair per thread (sampler.cc), not per Sampler: with
  // 64 sequences of a 262144-token vocabulary, buffers per sequence held 256 MB that each step walked through cold.
};

// Index of the first maximum.
model::TokenId argmax(std::span<const float> logits);

}  // namespace tessera::engine
