// Sampler: turns a row of logits into the next token.
//
// temperature 0 is greedy (the first maximum). Otherwise logits are divided by the temperature,
// softmaxed, optionally cut to the top_k most likely tokens and then to the smallest set whose mass
// exceeds top_p, and one token is drawn with a seeded generator. With top_k = 0 the draw is the one
// llama2.c's run.c makes (same generator, same cut-off rule), so a seed reproduces its choices.
//
// Thread-safety: a Sampler holds its generator's state; use one per sequence.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/rng.h"
#include "base/status.h"
#include "model/tokenizer/tokenizer.h"

namespace tessera::engine {

struct SamplingParams {
  float temperature = 1.0f;
  float top_p = 1.0f;  // 1: no nucleus cut
  int top_k = 0;       // 0: no top-k cut
  uint64_t seed = 0;   // 0: derived from the clock
};

// InvalidArgument for a negative or non-finite temperature, top_p outside (0, 1], negative top_k.
Status validate(const SamplingParams& p);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  uint64_t seed() const { return seed_; }
  // `logits` is modified (scaled and turned into probabilities in place).
  model::TokenId sample(std::span<float> logits);

 private:
  SamplingParams params_;
  uint64_t seed_;
  Rng rng_;
  struct Candidate {
    float prob;
    int32_t index;
  };
  std::vector<Candidate> candidates_;
};

// Index of the first maximum.
model::TokenId argmax(std::span<const float> logits);

}  // namespace tessera::engine
