// Conformance cases of the mixture-of-experts operators: routing for every gating function (with and without
// renormalisation, a selection bias and a scale, tied and NaN logits), and the experts for every weight type a
// matmul takes, as separate gate/up or fused gate_up, with biases and each activation, over batches whose rows
// share experts or not. Expert stacks go through Device::prepare_matmul_weight as the engine uploads them (the
// cpu device repacks each expert's matrix), so the layout a model runs is the one checked.
#include <algorithm>

#include <fmt/core.h>

#include "ops/conformance/conformance.h"

namespace tessera::ops::conformance {
namespace {

constexpr double kRouting = 1e-8;    // the same choice of experts; weights through exp
constexpr double kFloatMoe = 1e-7;   // three matmuls and an activation in f32 (f16/bf16 weights widened)
constexpr double kQuantMoe = 1e-3;   // activations quantised to 8 bits, twice (x, then the gated hidden)
constexpr double kKQuantMoe = 4e-3;  // 256-element activation blocks (see cases.cc's kKQuantMatMul)

const DType kExpertTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0, DType::kQ4_0,
                              DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ2_K, DType::kQ3_K,
                              DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kMXFP4};

const char* gating_name(MoeGating g) {
  return g == MoeGating::kSoftmax ? "softmax" : g == MoeGating::kSigmoid ? "sigmoid" : "softmax_weight";
}

void add_route(std::vector<Case>& cases) {
  for (MoeGating g : {MoeGating::kSoftmax, MoeGating::kSigmoid, MoeGating::kSoftmaxWeight}) {
    for (auto [experts, k] : {std::pair<int64_t, int64_t>{8, 2}, {32, 4}, {128, 8}, {8, 1}, {4, 4}}) {
      for (int64_t n : {1, 7, 64}) {
        // plain, normalised, bias + scale, ties + NaN, normalised with per-expert scales (gemma4)
        for (int variant = 0; variant < 5; ++variant) {
          const bool normalize = variant == 1 || variant == 3 || variant == 4;
          const bool expert_scale = variant == 4;
          const bool bias = variant == 2;
          const float scale = variant == 2 ? 2.5f : 1.0f;
          const bool special = variant == 3;
          if (special && n == 1) continue;
          cases.push_back({"moe_route", DType::kF32,
                           fmt::format("{} n={} experts={} k={}{}{}{}{}", gating_name(g), n, experts, k,
                                       normalize ? " norm" : "", bias ? " bias scale=2.5" : "",
                                       special ? " ties+nan" : "", expert_scale ? " expert_scale" : ""),
                           kRouting, false, [=](CaseEnv& e) -> Op {
                             std::vector<float> l(static_cast<size_t>(n * experts));
                             for (float& v : l) v = (e.rng().next_f32() * 2.0f - 1.0f) * 3.0f;
                             if (special) {
                               // Row 0: every logit equal (the lowest experts win); row 1 holds a NaN, which never
                               // wins.
                               for (int64_t i = 0; i < experts; ++i) l[static_cast<size_t>(i)] = 0.5f;
                               l[static_cast<size_t>(experts)] = NAN;
                             }
                             MoeRouteOp op{e.values(DType::kF32, {n, experts}, l), e.output(DType::kI32, {n, k}, 0.0f),
                                           e.output(DType::kF32, {n, k})};
                             if (bias) op.bias = e.random(DType::kF32, {experts}, 0.5f);
                             if (expert_scale) op.expert_scale = e.random(DType::kF32, {experts}, 2.0f);
                             op.gating = g;
                             op.normalize = normalize;
                             op.scale = scale;
                             return op;
                           }});
        }
      }
    }
  }
}

void add_experts(std::vector<Case>& cases) {
  for (DType w : kExpertTypes) {
    const int block = dtype_info(w).block_elems;
    const bool kquant = block == 256, quant = block > 1;
    const int64_t dim = kquant ? 256 : 64, ff = kquant ? 512 : 96;
    const double bound = kquant ? kKQuantMoe : quant ? kQuantMoe : kFloatMoe;
    for (auto [experts, k] : {std::pair<int64_t, int64_t>{4, 1}, {8, 2}}) {
      for (int64_t n : {1, 3, 17, 64}) {
        for (int variant = 0; variant < 3; ++variant) {  // separate gate/up; fused gate_up; biases + swiglu_oai
          if (variant > 0 && (n == 3 || experts == 4)) continue;
          const bool fused = variant == 1, oai = variant == 2;
          const Activation act =
              oai ? Activation::kSwigluOai : (variant == 1 ? Activation::kGeluTanh : Activation::kSilu);
          cases.push_back({"moe_experts", w,
                           fmt::format("n={} dim={} ff={} experts={} k={}{}", n, dim, ff, experts, k,
                                       fused ? " gate_up gelu_tanh"
                                       : oai ? " biases swiglu_oai"
                                             : ""),
                           bound, n * k * dim * ff * 3 > 6'000'000, [=](CaseEnv& e) -> Op {
                             // Routing of rows to experts: random, with every row of the first half on expert 0 so that
                             // some expert takes many rows.
                             std::vector<int32_t> ids(static_cast<size_t>(n * k));
                             for (int64_t t = 0; t < n; ++t) {
                               std::vector<int32_t> pick;
                               while (static_cast<int64_t>(pick.size()) < k) {
                                 auto c = static_cast<int32_t>(e.rng().next_u32() % experts);
                                 if (pick.empty() && t < n / 2) c = 0;
                                 if (std::find(pick.begin(), pick.end(), c) == pick.end()) pick.push_back(c);
                               }
                               std::copy(pick.begin(), pick.end(), ids.begin() + t * k);
                             }
                             MoeExpertsOp op;
                             op.x = e.random(DType::kF32, {n, dim});
                             op.ids = e.ints({n, k}, ids);
                             op.weights = e.random(DType::kF32, {n, k});
                             if (fused) {
                               op.gate_up = e.weight(w, {experts, 2 * ff, dim});
                             } else {
                               op.gate = e.weight(w, {experts, ff, dim});
                               op.up = e.weight(w, {experts, ff, dim});
                             }
                             op.down = e.weight(w, {experts, dim, ff});
                             op.out = e.output(DType::kF32, {n, dim});
                             op.act = act;
                             if (oai) {
                               op.gate_bias = e.random(DType::kF32, {experts, ff});
                               op.up_bias = e.random(DType::kF32, {experts, ff});
                               op.down_bias = e.random(DType::kF32, {experts, dim});
                               op.limit = 0.5f;  // low enough that the clamps bite on these inputs
                             }
                             return op;
                           }});
        }
      }
    }
  }
}

// Wide rows and many of them: the backends split the work over their threads (the cpu's final weighted sum is a
// parallel loop over rows, whose workers must reach the caller's results).
void add_wide_experts(std::vector<Case>& cases) {
  for (DType w : {DType::kF32, DType::kQ8_0, DType::kQ4_K}) {
    const int64_t n = 64, dim = 1024, ff = 256, experts = 8, k = 4;
    cases.push_back({"moe_experts", w, fmt::format("n={} dim={} ff={} experts={} k={} threads", n, dim, ff, experts, k),
                     w == DType::kF32    ? kFloatMoe
                     : w == DType::kQ4_K ? kKQuantMoe
                                         : kQuantMoe,
                     false, [=](CaseEnv& e) -> Op {
                       std::vector<int32_t> ids(static_cast<size_t>(n * k));
                       for (int64_t t = 0; t < n; ++t)
                         for (int64_t j = 0; j < k; ++j)
                           ids[static_cast<size_t>(t * k + j)] = static_cast<int32_t>((t + 3 * j) % experts);
                       return MoeExpertsOp{e.random(DType::kF32, {n, dim}), e.ints({n, k}, ids),
                                           e.random(DType::kF32, {n, k}),   e.weight(w, {experts, ff, dim}),
                                           e.weight(w, {experts, ff, dim}), e.weight(w, {experts, dim, ff}),
                                           e.output(DType::kF32, {n, dim})};
                     }});
  }
}

}  // namespace

void add_moe_cases(std::vector<Case>& cases) {
  add_wide_experts(cases);
  add_route(cases);
  add_experts(cases);
}

}  // namespace tessera::ops::conformance
