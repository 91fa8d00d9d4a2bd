// Times Sampler::sample over one 262144-wide row of logits (Gemma's vocabulary), best of 50, for greedy,
// temperature alone, top-p alone and top-k. MODEL_LIKE=1 at compile time: 30 likely tokens over a normal tail
// (a model's shape: tens of thousands of tail tokens pass run.c's cutoff, the nucleus is the likely ones);
// otherwise a flat normal row (the nucleus is most of the vocabulary). Build against a release tree:
//   g++ -std=c++20 -O2 [-DMODEL_LIKE=1] -Isrc docs/bench/sampler-topp-zen5/sampler_bench.cc \
//     build/release/src/engine/libtessera_engine.a build/release/src/base/libtessera_base.a -lfmt -o sampler_bench
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "engine/sampler.h"

using namespace tessera::engine;

int main() {
  std::mt19937 g(3);
  std::normal_distribution<float> nd(0, 3);
  std::vector<float> base(262144);
#if MODEL_LIKE
  for (auto& v : base) v = nd(g) * 0.7f;
  for (int i = 0; i < 30; ++i) base[(i * 7919) % base.size()] += 14.0f - 0.4f * i;
#else
  for (auto& v : base) v = nd(g);
#endif
  struct P {
    float t, top_p;
    int top_k;
    const char* name;
  };
  for (P p : {P{0, 1, 0, "greedy"}, P{0.8f, 1, 0, "t0.8"}, P{0.8f, 0.95f, 0, "t0.8 top_p .95"},
              P{0.8f, 1, 40, "t0.8 top_k 40"}}) {
    SamplingParams sp;
    sp.temperature = p.t;
    sp.top_p = p.top_p;
    sp.top_k = p.top_k;
    sp.seed = 1;
    Sampler s(sp);
    std::vector<float> l;
    double best = 1e9;
    for (int r = 0; r < 50; ++r) {
      l = base;
      auto t0 = std::chrono::steady_clock::now();
      volatile auto tok = s.sample(l);
      (void)tok;
      best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("%-16s %.3f ms\n", p.name, best);
  }
}
