#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <random>

#include <fmt/core.h>

namespace tessera::engine {
namespace {

// A request without a seed: two of them (or two choices of one request, n > 1) must not draw alike.
uint64_t random_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

void softmax_in_place(std::span<float> x) {
  float mx = x[0];
  for (float v : x) mx = v > mx ? v : mx;
  float sum = 0.0f;
  for (float& v : x) {
    v = std::exp(v - mx);
    sum += v;
  }
  for (float& v : x) v /= sum;
}

// Top-p alone first sorts this many of the candidates (Sampler::sample).
constexpr size_t kNucleusPrefix = 256;

}  // namespace

Sampler::Sampler(const SamplingParams& params)
    : params_(params), seed_(params.seed ? *params.seed : random_seed()), rng_(seed_) {}

model::TokenId argmax(std::span<const float> logits) {
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<model::TokenId>(best);
}

model::TokenId Sampler::sample(std::span<float> logits) {
  if (params_.temperature == 0.0f) return argmax(logits);
  for (float& v : logits) v /= params_.temperature;
  softmax_in_place(logits);
  const float coin = rng_.next_f32();
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

  candidates_.clear();
  // Tokens below this probability cannot be in the nucleus (run.c's pre-filter, which saves the sort).
  const float cutoff = use_top_p && !use_top_k ? (1.0f - params_.top_p) / static_cast<float>(n - 1) : 0.0f;
  for (int i = 0; i < n; ++i) {
    if (logits[static_cast<size_t>(i)] >= cutoff) candidates_.push_back({logits[static_cast<size_t>(i)], i});
  }
  auto by_prob = [](const Candidate& a, const Candidate& b) {
    return a.prob > b.prob || (a.prob == b.prob && a.index < b.index);
  };
  // The candidates in order from the front: all of them, or (top-p alone) a prefix that holds the nucleus.
  size_t sorted = candidates_.size();
  if (use_top_k && static_cast<size_t>(params_.top_k) < candidates_.size()) {
    std::partial_sort(candidates_.begin(), candidates_.begin() + params_.top_k, candidates_.end(), by_prob);
    candidates_.resize(static_cast<size_t>(params_.top_k));
    sorted = candidates_.size();
  } else if (use_top_p && !use_top_k && candidates_.size() > 2 * kNucleusPrefix) {
    // A model's nucleus is mostly a few dozen tokens of a vocabulary of up to 262144, whose whole sort took 3 ms:
    // the first kNucleusPrefix in order (the order a whole sort gives them, ties by index) settle it when they
    // hold top_p; otherwise the whole sort as before.
    sorted = kNucleusPrefix;
    std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<std::ptrdiff_t>(sorted), candidates_.end(),
                      by_prob);
    float held = 0.0f;
    for (size_t i = 0; i < sorted; ++i) held += candidates_[i].prob;
    if (!(held > params_.top_p)) {
      std::sort(candidates_.begin(), candidates_.end(), by_prob);
      sorted = candidates_.size();
    }
  } else {
    std::sort(candidates_.begin(), candidates_.end(), by_prob);
  }
  float mass = 0.0f;
  for (const Candidate& c : candidates_) mass += c.prob;
  // Without top-k this is run.c's rule (the nucleus target is top_p of the whole distribution); after a
  // top-k cut the target is top_p of the mass that remains.
  const float target = !use_top_p ? mass : (use_top_k ? params_.top_p * mass : params_.top_p);
  float cumulative = 0.0f;
  size_t last = sorted - 1;
  for (size_t i = 0; i < sorted; ++i) {
    cumulative += candidates_[i].prob;
    if (cumulative > target) {
      last = i;
      break;
    }
  }
  const float r = coin * cumulative;
  float cdf = 0.0f;
  for (size_t i = 0; i <= last; ++i) {
    cdf += candidates_[i].prob;
    if (r < cdf) return candidates_[i].index;
  }
  return candidates_[last].index;
}

TokenLogprobs compute_logprobs(std::span<const float> logits, model::TokenId token, int top) {
  float mx = logits[0];
  for (float v : logits) mx = v > mx ? v : mx;
  double sum = 0.0;
  for (float v : logits) sum += std::exp(static_cast<double>(v - mx));
  const float log_z = mx + static_cast<float>(std::log(sum));
  TokenLogprobs out;
  out.token = token;
  out.logprob = logits[static_cast<size_t>(token)] - log_z;
  if (top > 0) {
    std::vector<int32_t> idx(logits.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int32_t>(i);
    const size_t k = std::min(idx.size(), static_cast<size_t>(top));
    std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(), [&](int32_t a, int32_t b) {
      return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)] ||
             (logits[static_cast<size_t>(a)] == logits[static_cast<size_t>(b)] && a < b);
    });
    for (size_t i = 0; i < k; ++i) out.top.emplace_back(idx[i], logits[static_cast<size_t>(idx[i])] - log_z);
  }
  return out;
}

}  // namespace tessera::engine
