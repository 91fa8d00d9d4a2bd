// SynthWeightOptions::token_lead (model/synth.h): at full width a random model's logits are a near-uniform draw;
// with the residual writes scaled as decisive_write_scale() says, the current token leads the others by about
// the asked number of standard deviations, while the layers still set the rest.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/model_runner.h"
#include "model/synth.h"
#include "ops/registry.h"

namespace tessera::engine {
namespace {

// How many standard deviations of the other logits the last prompt token's own logit stands above their mean.
double lead_of_last_token(const model::SynthModel& m, const std::vector<TokenId>& prompt, std::vector<float>* out) {
  auto device = ops::open_device("cpu");
  EXPECT_TRUE(device.ok());
  RunnerOptions o;
  o.max_batch_tokens = 64;
  auto r = ModelRunner::create(**device, m.config, m.weights, o);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  SequenceKv s;
  std::vector<float> logits;
  EXPECT_TRUE((*r)->prefill(s, prompt, logits).ok());
  double sum = 0, sq = 0;
  const int t = prompt.back();
  for (size_t i = 0; i < logits.size(); ++i) {
    if (static_cast<int>(i) == t) continue;
    sum += logits[i];
    sq += static_cast<double>(logits[i]) * logits[i];
  }
  const double n = static_cast<double>(logits.size() - 1), mean = sum / n;
  if (out != nullptr) *out = logits;
  return (logits[static_cast<size_t>(t)] - mean) / std::sqrt(sq / n - mean * mean);
}

TEST(SynthTokenLead, TheCurrentTokenLeadsByAboutTheAskedDeviations) {
  // smollm2-135m at its published width (576, hidden 1536, vocab 49152), 2 layers.
  auto c = model::synth_shape("smollm2-135m");
  ASSERT_TRUE(c.ok());
  c->n_layers = 2;
  c->max_seq_len = 64;
  const std::vector<TokenId> prompt = {1, 4000, 17, 30000, 2222, 999, 48000, 12345};
  const model::SynthModel plain = model::synthesize_weights(*c, 7);
  const model::SynthModel led = model::synthesize_weights(*c, 7, {.token_lead = 10});
  EXPECT_LT(model::decisive_write_scale(*c, 10), 0.5);
  EXPECT_EQ(model::decisive_write_scale(*c, 0), 1.0);
  std::vector<float> logits;
  const double before = lead_of_last_token(plain, prompt, nullptr);
  const double after = lead_of_last_token(led, prompt, &logits);
  std::printf("smollm2-135m, 2 layers: the last token leads by %.2f deviations, %.2f with --token-lead 10\n", before,
              after);
  EXPECT_LT(before, 5.0);  // the vocabulary's own maximum is about 4.4 deviations: no clear winner
  EXPECT_GT(after, 7.0);
  EXPECT_LT(after, 14.0);
  EXPECT_EQ(std::max_element(logits.begin(), logits.end()) - logits.begin(), prompt.back());
  // The layers still shape the other logits: another prompt ending in the same token gives other values.
  std::vector<TokenId> other = prompt;
  other[2] = 25;
  std::vector<float> other_logits;
  lead_of_last_token(led, other, &other_logits);
  double diff = 0;
  for (size_t i = 0; i < logits.size(); ++i)
    diff = std::max(diff, std::abs(static_cast<double>(logits[i] - other_logits[i])));
  EXPECT_GT(diff, 0.1);
}

}  // namespace
}  // namespace tessera::engine
