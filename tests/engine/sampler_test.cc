#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>

namespace tessera::engine {
namespace {

std::vector<float> logits_of(std::vector<float> probs) {
  for (float& p : probs) p = std::log(p);
  return probs;
}

TEST(Sampler, TemperatureZeroIsArgmax) {
  Sampler s({.temperature = 0.0f});
  std::vector<float> l = {0.1f, 2.0f, 2.0f, -1.0f};
  EXPECT_EQ(s.sample(l), 1);
}

TEST(Sampler, MatchesLlama2cMultinomialDraw) {
  // run.c: softmax(logits / T), coin = random_f32(seed), first index whose running sum exceeds the coin.
  std::vector<float> probs = {0.1f, 0.2f, 0.3f, 0.4f};
  for (uint64_t seed : {1ull, 42ull, 1234567ull}) {
    Rng rng(seed);
    float coin = rng.next_f32();
    int want = 3;
    float cdf = 0;
    for (int i = 0; i < 4; ++i) {
      cdf += probs[static_cast<size_t>(i)];
      if (coin < cdf) {
        want = i;
        break;
      }
    }
    Sampler s({.temperature = 1.0f, .seed = seed});
    std::vector<float> l = logits_of(probs);
    EXPECT_EQ(s.sample(l), want) << "seed " << seed;
  }
}

TEST(Sampler, SameSeedSameDraws) {
  Sampler a({.temperature = 0.8f, .seed = 99}), b({.temperature = 0.8f, .seed = 99});
  for (int i = 0; i < 50; ++i) {
    std::vector<float> la = logits_of({0.25f, 0.25f, 0.25f, 0.25f}), lb = la;
    EXPECT_EQ(a.sample(la), b.sample(lb));
  }
}

TEST(Sampler, FrequenciesFollowTheDistribution) {
  Sampler s({.temperature = 1.0f, .seed = 7});
  std::vector<int> counts(3);
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    std::vector<float> l = logits_of({0.1f, 0.2f, 0.7f});
    counts[static_cast<size_t>(s.sample(l))]++;
  }
  EXPECT_NEAR(counts[0] / double(n), 0.1, 0.015);
  EXPECT_NEAR(counts[1] / double(n), 0.2, 0.015);
  EXPECT_NEAR(counts[2] / double(n), 0.7, 0.015);
}

TEST(Sampler, TopPAndTopKCutTheTail) {
  Sampler p({.temperature = 1.0f, .top_p = 0.5f, .seed = 3});
  Sampler k({.temperature = 1.0f, .top_k = 2, .seed = 3});
  Sampler k1({.temperature = 1.0f, .top_k = 1, .seed = 3});
  for (int i = 0; i < 500; ++i) {
    std::vector<float> a = logits_of({0.1f, 0.2f, 0.7f}), b = a, c = a;
    EXPECT_EQ(p.sample(a), 2);  // 0.7 alone exceeds top_p = 0.5
    EXPECT_NE(k.sample(b), 0);  // the least likely is outside the top 2
    EXPECT_EQ(k1.sample(c), 2);
  }
}

TEST(Sampler, RejectsBadParameters) {
  EXPECT_FALSE(validate(SamplingParams{.temperature = -1.0f}).ok());
  EXPECT_FALSE(validate(SamplingParams{.temperature = NAN}).ok());
  EXPECT_FALSE(validate(SamplingParams{.top_p = 0.0f}).ok());
  EXPECT_FALSE(validate(SamplingParams{.top_p = 1.5f}).ok());
  EXPECT_FALSE(validate(SamplingParams{.top_k = -2}).ok());
  EXPECT_TRUE(validate(SamplingParams{.temperature = 0.0f, .top_p = 1.0f, .top_k = 0}).ok());
}

}  // namespace
}  // namespace tessera::engine
