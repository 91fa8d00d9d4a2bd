#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "engine/internal/sampling_kernels.h"

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

// run.c's sample_topp written out plainly, with top-k beside it: candidates at or above (1 - top_p) / (n - 1)
// (top-p alone), all of them sorted by probability (ties: lower index), the first top_k of them, the shortest
// prefix whose mass exceeds the target (top_p; after a top-k cut top_p of what remains), and a draw of
// coin * that prefix's mass along it. The probabilities are the sampler's own softmax (checked against a double
// one below): over a flat 262144-token row the drawn index moves with the last bit of the probabilities' sum.
struct Nucleus {
  std::vector<std::pair<float, int>> sorted;  // probability, token
  size_t last = 0;                            // the nucleus is sorted[0 .. last]
  float cumulative = 0.0f;                    // its mass
};

Nucleus reference_nucleus(std::vector<float> l, float temperature, float top_p, int top_k) {
  softmax(l, temperature);
  const bool use_k = top_k > 0 && static_cast<size_t>(top_k) < l.size();
  const float cutoff = top_p < 1.0f && !use_k ? (1.0f - top_p) / static_cast<float>(l.size() - 1) : 0.0f;
  Nucleus n;
  auto& c = n.sorted;
  for (size_t i = 0; i < l.size(); ++i)
    if (l[i] >= cutoff) c.emplace_back(l[i], static_cast<int>(i));
  std::sort(c.begin(), c.end(),
            [](auto& a, auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  if (use_k) c.resize(static_cast<size_t>(top_k));
  float mass = 0.0f;
  for (auto& x : c) mass += x.first;
  const float target = top_p >= 1.0f ? mass : (use_k ? top_p * mass : top_p);
  n.last = c.size() - 1;
  for (size_t i = 0; i < c.size(); ++i) {
    n.cumulative += c[i].first;
    if (n.cumulative > target) {
      n.last = i;
      break;
    }
  }
  return n;
}

int reference_draw(const Nucleus& n, float coin) {
  float cdf = 0.0f;
  for (size_t i = 0; i <= n.last; ++i) {
    cdf += n.sorted[i].first;
    if (coin * n.cumulative < cdf) return n.sorted[i].second;
  }
  return n.sorted[n.last].second;
}

// Gemma's vocabulary, three shapes: model-like (40 likely tokens; of the tail, tens of thousands still pass run.c's
// cutoff), flat (the nucleus is most of the vocabulary) and coarse (logits on a grid of quarters: thousands of
// tokens share each probability, so ties decide the order).
enum class Row { kPeaked, kFlat, kCoarse };
std::vector<float> row_of(Row shape, uint64_t seed) {
  Rng gen(seed);
  std::vector<float> logits(262144);
  for (float& v : logits) v = (gen.next_f32() - 0.5f) * (shape == Row::kPeaked ? 4.0f : 2.0f);
  if (shape == Row::kPeaked) {
    for (int i = 0; i < 40; ++i) logits[static_cast<size_t>(i) * 6007] += 9.0f - 0.1f * static_cast<float>(i);
  }
  if (shape == Row::kCoarse) {
    for (float& v : logits) v = std::round(v * 8.0f) / 4.0f;
  }
  return logits;
}

TEST(Sampler, TopPOverALargeVocabularyDrawsAsTheWholeSortDoes) {
  // The peaked row's nucleus settles within the sampler's first sorted prefix; the flat and coarse ones need
  // every candidate in order (the radix sort, ties by index).
  for (Row shape : {Row::kPeaked, Row::kFlat, Row::kCoarse}) {
    const std::vector<float> logits = row_of(shape, 5 + static_cast<uint64_t>(shape));
    for (float top_p : {0.5f, 0.9f, 0.95f}) {
      const Nucleus nucleus = reference_nucleus(logits, 0.8f, top_p, 0);
      for (uint64_t seed = 1; seed <= 12; ++seed) {
        Rng rng(seed);
        const int want = reference_draw(nucleus, rng.next_f32());
        Sampler s({.temperature = 0.8f, .top_p = top_p, .seed = seed});
        std::vector<float> l = logits;
        ASSERT_EQ(s.sample(l), want) << static_cast<int>(shape) << " top_p " << top_p << " seed " << seed;
      }
    }
  }
}

TEST(Sampler, TopKOverALargeVocabularyDrawsAsTheWholeSortDoes) {
  // k from 1 to past the selection's first pool (4096), alone and with top-p; the coarse row puts thousands of
  // tied tokens at the k-th place, where the lower indices must win.
  for (Row shape : {Row::kPeaked, Row::kFlat, Row::kCoarse}) {
    const std::vector<float> logits = row_of(shape, 9 + static_cast<uint64_t>(shape));
    for (int top_k : {1, 40, 1000, 5000}) {
      for (float top_p : {1.0f, 0.9f}) {
        const Nucleus nucleus = reference_nucleus(logits, 0.8f, top_p, top_k);
        for (uint64_t seed = 1; seed <= 6; ++seed) {
          Rng rng(seed);
          const int want = reference_draw(nucleus, rng.next_f32());
          Sampler s({.temperature = 0.8f, .top_p = top_p, .top_k = top_k, .seed = seed});
          std::vector<float> l = logits;
          ASSERT_EQ(s.sample(l), want) << static_cast<int>(shape) << " top_k " << top_k << " top_p " << top_p
                                       << " seed " << seed;
        }
      }
    }
  }
}

TEST(Sampler, ArgmaxIsTheFirstLargest) {
  std::vector<float> l(1000, -1.0f);
  l[998] = 3.0f;
  l[517] = 3.0f;
  l[3] = 2.5f;
  EXPECT_EQ(argmax(l), 517);
  l[999] = INFINITY;
  EXPECT_EQ(argmax(l), 999);
  std::vector<float> masked(37, -INFINITY);
  masked[36] = -50.0f;
  EXPECT_EQ(argmax(masked), 36);
  masked[36] = -INFINITY;
  EXPECT_EQ(argmax(masked), 0);  // nothing allowed: the first
  std::vector<float> short_row = {0.5f, 1.5f, 1.5f};
  EXPECT_EQ(argmax(short_row), 1);
}

TEST(Sampler, LogprobsAreTheLogSoftmaxAndItsLargest) {
  Rng gen(17);
  std::vector<float> logits(128256 + 5);
  for (float& v : logits) v = (gen.next_f32() - 0.5f) * 20.0f;
  for (size_t i = 0; i < 300; ++i) logits[i * 400] = 12.0f;  // ties at the top: lower indices first
  logits[7] = -INFINITY;
  double mx = -INFINITY, sum = 0.0;
  for (float v : logits) mx = std::max(mx, static_cast<double>(v));
  for (float v : logits) sum += std::exp(static_cast<double>(v) - mx);
  const double log_z = mx + std::log(sum);
  const TokenLogprobs lp = compute_logprobs(logits, 1234, 20);
  EXPECT_NEAR(lp.logprob, logits[1234] - log_z, 1e-6 + 2e-7 * std::abs(logits[1234] - log_z));  // f32 rounding
  ASSERT_EQ(lp.top.size(), 20u);
  for (size_t i = 0; i < 20; ++i) {
    EXPECT_EQ(lp.top[i].first, static_cast<int>(i * 400));
    EXPECT_NEAR(lp.top[i].second, 12.0 - log_z, 1e-6 + 2e-7 * std::abs(12.0 - log_z));
  }
  // More alternatives asked for than there are finite logits: the -inf ones come last, in index order.
  std::vector<float> few = {-INFINITY, 1.0f, -INFINITY, 2.0f};
  const TokenLogprobs f = compute_logprobs(few, 3, 4);
  ASSERT_EQ(f.top.size(), 4u);
  EXPECT_EQ(f.top[0].first, 3);
  EXPECT_EQ(f.top[1].first, 1);
  EXPECT_EQ(f.top[2].first, 0);
  EXPECT_EQ(f.top[3].first, 2);
  EXPECT_TRUE(std::isinf(f.top[3].second));
}

TEST(Sampler, RowsWithoutACandidateStillDrawAToken) {
  // A one-token vocabulary (run.c's cutoff is (1 - top_p) / 0) and rows of NaN (a broken model's logits) under
  // every cut: a token in range, never a read past the candidates.
  for (SamplingParams p :
       {SamplingParams{.temperature = 0.8f, .top_p = 0.9f}, SamplingParams{.temperature = 0.8f, .top_k = 40},
        SamplingParams{.temperature = 0.8f, .top_p = 0.9f, .top_k = 40, .min_p = 0.1f},
        SamplingParams{.temperature = 0.8f}}) {
    Sampler s(p);
    std::vector<float> one = {3.0f};
    EXPECT_EQ(s.sample(one), 0);
    for (size_t n : {5u, 2000u}) {
      std::vector<float> nan(n, NAN);
      const int t = s.sample(nan);
      EXPECT_GE(t, 0);
      EXPECT_LT(t, static_cast<int>(n));
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
