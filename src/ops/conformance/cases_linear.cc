// Conformance cases of Qwen3.5's operators: the gated delta rule and the causal convolution, from a fresh state
// (reset) and from a carried one, over one token (decode) and over chunks (prefill), with as many value heads as key
// heads and with twice as many; the head split of the gated query; partial rotary (rot_dims) with and without a
// frequency table; silu_mul's sigmoid gate, elementwise and one value per row.
#include <cmath>
#include <tuple>

#include <fmt/core.h>

#include "ops/conformance/conformance.h"

namespace tessera::ops::conformance {
namespace {

constexpr double kRecurrent = 1e-9;  // exp, log and sqrt per token; dot products in the build's order
constexpr double kPointwise = 1e-10;

}  // namespace

void add_linear_attention_cases(std::vector<Case>& cases) {
  for (int64_t n : {1, 5, 64}) {
    for (auto [hk, hv, s] : {std::tuple<int64_t, int64_t, int64_t>{2, 2, 32}, {2, 4, 16}, {1, 3, 128}}) {
      for (bool reset : {true, false}) {
        cases.push_back({"gated_delta_rule", DType::kF32,
                         fmt::format("n={} k_heads={} v_heads={} S={}{}", n, hk, hv, s, reset ? " reset" : ""),
                         kRecurrent, false, [=](CaseEnv& e) -> Op {
                           GatedDeltaRuleOp op{e.random(DType::kF32, {n, (2 * hk + hv) * s}, 2.0f),
                                               e.random(DType::kF32, {n, hv}, 3.0f),
                                               e.random(DType::kF32, {n, hv}, 3.0f),
                                               e.random(DType::kF32, {hv}, 1.0f),
                                               e.random(DType::kF32, {hv}, 1.0f),
                                               e.output(DType::kF32, {hv, s, s}, 0.5f),
                                               e.output(DType::kF32, {n, hv, s})};
                           op.k_heads = static_cast<int32_t>(hk);
                           op.reset = reset;
                           return op;
                         }});
      }
    }
    for (auto [channels, taps] : {std::pair<int64_t, int64_t>{96, 4}, {1000, 4}, {64, 2}}) {
      for (bool reset : {true, false}) {
        cases.push_back({"causal_conv1d", DType::kF32,
                         fmt::format("n={} channels={} taps={}{}", n, channels, taps, reset ? " reset" : ""),
                         kPointwise, false, [=](CaseEnv& e) -> Op {
                           return CausalConv1dOp{e.random(DType::kF32, {n, channels}, 2.0f),
                                                 e.random(DType::kF32, {channels, taps}, 1.0f),
                                                 e.output(DType::kF32, {taps - 1, channels}, 2.0f),
                                                 e.output(DType::kF32, {n, channels}), reset};
                         }});
      }
    }
    cases.push_back(
        {"split_heads", DType::kF32, fmt::format("n={} heads=8 d=64", n), 0.0, false, [=](CaseEnv& e) -> Op {
           return SplitHeadsOp{e.random(DType::kF32, {n, 8, 128}), e.output(DType::kF32, {n, 8, 64}),
                               e.output(DType::kF32, {n, 8, 64})};
         }});
    cases.push_back(
        {"silu_mul", DType::kF32, fmt::format("n={} width=512 sigmoid", n), kPointwise, false, [=](CaseEnv& e) -> Op {
           return SiluMulOp{e.random(DType::kF32, {n, 512}, 8.0f), e.random(DType::kF32, {n, 512}),
                            e.output(DType::kF32, {n, 512}), Activation::kSigmoid};
         }});
    // One gate value per row for up's whole row (Qwen3.5-MoE's shared-expert gate).
    cases.push_back({"silu_mul", DType::kF32, fmt::format("n={} width=512 sigmoid row-gate", n), kPointwise, false,
                     [=](CaseEnv& e) -> Op {
                       return SiluMulOp{e.random(DType::kF32, {n, 1}, 8.0f), e.random(DType::kF32, {n, 512}),
                                        e.output(DType::kF32, {n, 512}), Activation::kSigmoid};
                     }});
    for (bool table : {false, true}) {
      cases.push_back({"rope", DType::kF32,
                       fmt::format("half n={} heads=4/2 head_dim=64 rot_dims=16{}", n, table ? " freqs" : ""),
                       kPointwise, false, [=](CaseEnv& e) -> Op {
                         std::vector<int32_t> pos(static_cast<size_t>(n));
                         for (int32_t& p : pos) p = static_cast<int32_t>(e.rng().next_u32() % 4096);
                         RopeOp op{e.output(DType::kF32, {n, 4, 64}), e.output(DType::kF32, {n, 2, 64}),
                                   e.ints({n}, pos), 1e7f, RopeLayout::kHalf};
                         op.rot_dims = 16;
                         if (table) {
                           std::vector<float> f(8);
                           for (size_t j = 0; j < f.size(); ++j)
                             f[j] = j == 7 ? 0.0f : std::pow(1e7f, -2.0f * static_cast<float>(j) / 16.0f);
                           op.freqs = e.values(DType::kF32, {8}, f);
                         }
                         return op;
                       }});
    }
  }
}

}  // namespace tessera::ops::conformance
