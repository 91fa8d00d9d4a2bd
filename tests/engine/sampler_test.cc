#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

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

// run.c's sample_topp written out plainly: probabilities softmax(logits / T), candidates at or above
// (1 - top_p) / (n - 1), all of them sorted by probability (ties: lower index), the shortest prefix whose mass
// exceeds top_p, and a draw of coin * that mass along it.
int nucleus_draw(std::vector<float> l, float temperature, float top_p, float coin) {
  for (float& v : l) v /= temperature;
  float mx = l[0];
  for (float v : l) mx = v > mx ? v : mx;
  float sum = 0.0f;
  for (float& v : l) {
    v = std::exp(v - mx);
    sum += v;
  }
  for (float& v : l) v /= sum;
  const float cutoff = (1.0f - top_p) / static_cast<float>(l.size() - 1);
  std::vector<std::pair<float, int>> c;
  for (size_t i = 0; i < l.size(); ++i)
    if (l[i] >= cutoff) c.emplace_back(l[i], static_cast<int>(i));
  std::sort(c.begin(), c.end(),
            [](auto& a, auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  float cumulative = 0.0f;
  size_t last = c.size() - 1;
  for (size_t i = 0; i < c.size(); ++i) {
    cumulative += c[i].first;
    if (cumulative > top_p) {
      last = i;
      break;
    }
  }
  float cdf = 0.0f;
  for (size_t i = 0; i <= last; ++i) {
    cdf += c[i].first;
    if (coin * cumulative < cdf) return c[i].second;
  }
  return c[last].second;
}

TEST(Sampler, TopPOverALargeVocabularyDrawsAsTheWholeSortDoes) {
  // Gemma's vocabulary, two shapes: a model-like one (40 likely tokens; of the tail, tens of thousands still pass
  // run.c's cutoff, but the nucleus settles within the sampler's first sorted prefix) and a flat one (the
  // nucleus is most of the vocabulary: the whole sort).
  for (bool peaked : {true, false}) {
    Rng gen(peaked ? 5 : 6);
    std::vector<float> logits(262144);
    for (float& v : logits) v = (gen.next_f32() - 0.5f) * (peaked ? 4.0f : 2.0f);
    if (peaked) {
      for (int i = 0; i < 40; ++i) logits[static_cast<size_t>(i) * 6007] += 9.0f - 0.1f * static_cast<float>(i);
    }
    for (float top_p : {0.5f, 0.9f, 0.95f}) {
      for (uint64_t seed = 1; seed <= 12; ++seed) {
        Rng rng(seed);
        const int want = nucleus_draw(logits, 0.8f, top_p, rng.next_f32());
        Sampler s({.temperature = 0.8f, .top_p = top_p, .seed = seed});
        std::vector<float> l = logits;
        ASSERT_EQ(s.sample(l), want) << (peaked ? "peaked" : "flat") << " top_p " << top_p << " seed " << seed;
      }
    }
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
