#include "engine/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <utility>

#include <fmt/core.h>

#include "engine/internal/sampling_kernels.h"

namespace tessera::engine {
namespace {

// A request without a seed: two of them (or two choices of one request, n > 1) must not draw alike.
uint64_t random_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

// Candidates in order of probability, highest first, ties by index, given them in index order: the order
// std::sort with Sampler's comparison gives. Least significant digit first over the probabilities' bits
// (non-negative floats order as their bit patterns; inverted for highest first), 11 bits a pass, each pass
// stable (so ties keep index order) and skipped when every key shares its digit. A whole sort of a flat
// distribution's candidates (most of a 262144-token vocabulary) took 3 ms.
template <typename Candidate>
void sort_by_probability(std::vector<Candidate>& c, std::vector<Candidate>& scratch) {
  constexpr int kBits = 11;
  constexpr uint32_t kDigits = 1u << kBits;
  auto key = [](const Candidate& x) { return ~std::bit_cast<uint32_t>(x.prob); };
  std::vector<uint32_t> count(3 * kDigits, 0);
  for (const Candidate& x : c) {
    const uint32_t k = key(x);
    ++count[k & (kDigits - 1)];
    ++count[kDigits + ((k >> kBits) & (kDigits - 1))];
    ++count[2 * kDigits + (k >> (2 * kBits))];
  }
  scratch.resize(c.size());
  for (int pass = 0; pass < 3; ++pass) {
    uint32_t* offsets = count.data() + static_cast<size_t>(pass) * kDigits;
    const int shift = pass * kBits;
    if (offsets[(key(c[0]) >> shift) & (kDigits - 1)] == c.size()) continue;  // one digit for all
    uint32_t at = 0;
    for (uint32_t d = 0; d < kDigits; ++d) at += std::exchange(offsets[d], at);
    for (const Candidate& x : c) scratch[offsets[(key(x) >> shift) & (kDigits - 1)]++] = x;
    c.swap(scratch);
  }
}

// Higher value first, ties by lower index: the order of run.c's sort.
template <typename Candidate>
bool by_value(const Candidate& a, const Candidate& b) {
  return a.prob > b.prob || (a.prob == b.prob && a.index < b.index);
}

// The k largest values at or above `floor` into `out`, in order. One pass keeps whatever beats the k-th best found
// so far and, when that pool fills, cuts it back to the best k (nth_element), which raises the bar: after the
// first few thousand tokens almost every one fails a comparison made eight at a time. A later value equal to the
// bar loses to the kept ones (their indices are lower), so it must beat it strictly.
template <typename Candidate>
void select_top(std::span<const float> values, size_t k, float floor, std::vector<Candidate>& out) {
  const size_t pool = std::max<size_t>(4 * k, 4096);
  out.resize(pool);
  float bar = std::nextafter(floor, -INFINITY);  // v > bar: v >= floor
  size_t kept = 0;
  for (size_t i = internal::first_above(values, 0, bar); i < values.size();
       i = internal::first_above(values, i + 1, bar)) {
    out[kept++] = {values[i], static_cast<int32_t>(i)};
    if (kept == pool) {
      std::nth_element(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(k - 1),
                       out.begin() + static_cast<std::ptrdiff_t>(kept), by_value<Candidate>);
      kept = k;
      bar = out[k - 1].prob;
    }
  }
  const size_t top = std::min(k, kept);
  std::partial_sort(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(top),
                    out.begin() + static_cast<std::ptrdiff_t>(kept), by_value<Candidate>);
  out.resize(top);
}

// Top-p alone first sorts this many of the candidates (Sampler::sample).
constexpr size_t kNucleusPrefix = 256;

}  // namespace

void softmax(std::span<float> logits, float temperature) { internal::softmax(logits, 1.0f / temperature); }

Sampler::Sampler(const SamplingParams& params)
    : params_(params), seed_(params.seed ? *params.seed : random_seed()), rng_(seed_) {}

model::TokenId argmax(std::span<const float> logits) {
  // The largest value, then where it first is (a row of NaN: 0).
  const float mx = internal::max_value(logits);
  const size_t at = internal::first_above(logits, 0, std::nextafter(mx, -INFINITY));
  return static_cast<model::TokenId>(at < logits.size() ? at : 0);
}

model::TokenId Sampler::sample(std::span<float> logits) {
  if (params_.temperature == 0.0f) return argmax(logits);
  softmax(logits, params_.temperature);
  const float coin = rng_.next_f32();
  // This thread's buffers (sampler.h): warm in its cache from the row it drew before, whichever sequence that was.
  thread_local std::vector<Candidate> candidates, scratch;
  const int n = static_cast<int>(logits.size());
  const bool use_top_k = params_.top_k > 0 && params_.top_k < n;
  const bool use_top_p = params_.top_p < 1.0f;
  if (params_.min_p > 0.0f) {
    float pmax = 0.0f;
    for (float p : logits) pmax = p > pmax ? p : pmax;
    const float floor = params_.min_p * pmax;
    float kept = 0.0f;
    for (float& p : logits) {
      if (p < floor) p = 0.0f;
      kept += p;
    }
    for (float& p : logits) p /= kept;
  }

  if (!use_top_k && !use_top_p) {
    float cdf = 0.0f;
    for (int i = 0; i < n; ++i) {
      cdf += logits[static_cast<size_t>(i)];
      if (coin < cdf) return i;
    }
    return n - 1;  // rounding
  }

  // Tokens below this probability cannot be in the nucleus (run.c's pre-filter, which saves the sort).
  const float cutoff = use_top_p && !use_top_k ? (1.0f - params_.top_p) / static_cast<float>(n - 1) : 0.0f;
  // The candidates in order from the front: all of them, the top k, or (top-p alone) a prefix of them that
  // holds the nucleus.
  size_t sorted = 0;
  if (use_top_k) {
    select_top(logits, static_cast<size_t>(params_.top_k), cutoff, candidates);
    sorted = candidates.size();
  } else if (logits.size() > 2 * kNucleusPrefix) {
    // A model's nucleus is mostly a few dozen tokens of a vocabulary of up to 262144: the first kNucleusPrefix
    // in order (the order a whole sort gives them, ties by index) settle it when they hold top_p.
    select_top(logits, kNucleusPrefix, cutoff, candidates);
    float held = 0.0f;
    for (const Candidate& c : candidates) held += c.prob;
    sorted = held > params_.top_p ? candidates.size() : 0;
  }
  if (sorted == 0) {  // every candidate, in order
    // Every token is written and the count advanced only for those kept: no branch to mispredict on a noisy tail.
    candidates.resize(logits.size());
    size_t kept = 0;
    for (int i = 0; i < n; ++i) {
      const float p = logits[static_cast<size_t>(i)];
      candidates[kept] = {p, i};
      kept += p >= cutoff ? 1 : 0;
    }
    candidates.resize(kept);
    if (kept > 2 * kNucleusPrefix) {
      sort_by_probability(candidates, scratch);
    } else {
      std::sort(candidates.begin(), candidates.end(), by_value<Candidate>);
    }
    sorted = candidates.size();
  }
  // No candidate at all: a row of NaN (a broken model) or a one-token vocabulary, whose cutoff is 1 / 0. The
  // first largest probability, as greedy would choose (0 for NaN everywhere).
  if (sorted == 0) return argmax(logits);
  float mass = 0.0f;
  for (const Candidate& c : candidates) mass += c.prob;
  // Without top-k this is run.c's rule (the nucleus target is top_p of the whole distribution); after a
  // top-k cut the target is top_p of the mass that remains.
  const float target = !use_top_p ? mass : (use_top_k ? params_.top_p * mass : params_.top_p);
  float cumulative = 0.0f;
  size_t last = sorted - 1;
  for (size_t i = 0; i < sorted; ++i) {
    cumulative += candidates[i].prob;
    if (cumulative > target) {
      last = i;
      break;
    }
  }
  const float r = coin * cumulative;
  float cdf = 0.0f;
  for (size_t i = 0; i <= last; ++i) {
    cdf += candidates[i].prob;
    if (r < cdf) return candidates[i].index;
  }
  return candidates[last].index;
}

TokenLogprobs compute_logprobs(std::span<const float> logits, model::TokenId token, int top) {
  // log Z = mx + log sum e^(x - mx), the sum in double.
  const float mx = internal::max_value(logits);
  const float log_z = mx + static_cast<float>(std::log(internal::sum_exp(logits, mx)));
  TokenLogprobs out;
  out.token = token;
  out.logprob = logits[static_cast<size_t>(token)] - log_z;
  if (top > 0) {
    struct Scored {
      float prob;  // the logit
      int32_t index;
    };
    const size_t k = std::min(logits.size(), static_cast<size_t>(top));
    std::vector<Scored> best;
    select_top(logits, k, -std::numeric_limits<float>::max(), best);
    if (best.size() < k) {  // fewer than k finite logits: every one, -inf included, in order
      best.resize(logits.size());
      for (size_t i = 0; i < logits.size(); ++i) best[i] = {logits[i], static_cast<int32_t>(i)};
      std::partial_sort(best.begin(), best.begin() + static_cast<std::ptrdiff_t>(k), best.end(), by_value<Scored>);
      best.resize(k);
    }
    for (const Scored& b : best) out.top.emplace_back(b.index, b.prob - log_z);
  }
  return out;
}

}  // namespace tessera::engine
