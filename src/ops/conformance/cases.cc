// The case list of the conformance suite. Shapes cover the models Tessera runs (stories260K, 15M, 110M,
// Qwen-like GQA): head_dim 64 and 128; GQA ratios 1, 2 and 7; odd sequence lengths; decode batches from 1
// to 64; contexts up to 4096; every weight and cache dtype an operator takes; and inputs holding NaN and
// +-Inf for the elementwise and row operators.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include <fmt/core.h>

#include "ops/conformance/conformance.h"

namespace tessera::ops::conformance {
namespace {

// Normalised-error bounds. Byte movers are exact; f32 reductions may sum in another order; quantised
// matrix products may quantise the activations too (8 bits: about 2e-5 of the signal's energy).
constexpr double kExact = 0.0;
constexpr double kReduction = 1e-9;
constexpr double kTranscendental = 1e-8;
constexpr double kAttention = 1e-7;
constexpr double kQuantMatMul = 5e-4;
// K-quant products quantise activations in 256-element blocks (one scale per weight super-block, as
// llama.cpp's q8_K does): a coarser step than 32-element blocks, and cases with a single output (m = 1) see
// the relative error of one dot product, which is heavy-tailed when that dot happens to be near zero.
constexpr double kKQuantMatMul = 2e-3;
// With one to three outputs the error is that of single dot products: 8-bit activations (step amax / 127)
// over k = 32 or 256 elements leave a relative error of a few percent when the dot is small against its
// terms (seen: 0.0035 for q5_0 at n = 1, k = 32, m = 1 in every cpu variant alike, the integer-exact generic
// build included).
constexpr double kQuantFewOutputs = 1e-2;

// Work (multiply-adds) above which a case is `slow`: the scalar reference takes tens of milliseconds.
constexpr int64_t kSlowWork = 6'000'000;
constexpr int kSuperBlockElems = 256;
// KV cache elements above which a case is `slow`: filling and uploading the cache dominates.
constexpr int64_t kSlowCache = 1 << 18;

const DType kWeightTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0, DType::kQ4_0,
                              DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ2_K, DType::kQ3_K,
                              DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kMXFP4};
// llama.cpp's -ctk / -ctv types Tessera keeps: the block types need head_dim a multiple of 32 (every shape below).
const DType kCacheTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0};

void add_matmul(std::vector<Case>& cases) {
  const std::pair<int64_t, int64_t> block_shapes[] = {{32, 1},    {64, 64},   {64, 172},  {128, 96},
                                                      {288, 288}, {288, 768}, {768, 288}, {512, 1000}};
  // K-quant rows are whole 256-element super-blocks: the stories110M (768, 2048) and Llama (4096) widths.
  const std::pair<int64_t, int64_t> super_shapes[] = {{256, 1},   {256, 64},  {512, 172},
                                                      {768, 288}, {2048, 96}, {4096, 33}};
  const std::pair<int64_t, int64_t> odd_shapes[] = {{172, 64}, {77, 13}};  // rows not a whole block
  for (DType w : kWeightTypes) {
    const int block = dtype_info(w).block_elems;
    const bool quant = block > 1;
    const double bound = block == kSuperBlockElems ? kKQuantMatMul : quant ? kQuantMatMul : kReduction;
    std::vector<std::pair<int64_t, int64_t>> shapes;
    if (block <= 32) shapes.assign(std::begin(block_shapes), std::end(block_shapes));
    if (block == kSuperBlockElems || w == DType::kQ8_0 || w == DType::kQ4_0)
      for (auto sh : super_shapes) {
        if (std::find(shapes.begin(), shapes.end(), sh) == shapes.end()) shapes.push_back(sh);
      }
    if (!quant) shapes.insert(shapes.end(), std::begin(odd_shapes), std::end(odd_shapes));
    for (auto [k, m] : shapes) {
      for (int64_t n : {1, 2, 3, 5, 8, 16, 33, 64}) {
        for (bool bias : {false, true}) {
          if (bias && n != 1 && n != 33) continue;
          const double b = quant && n * m < 4 ? kQuantFewOutputs : bound;
          cases.push_back(
              {"matmul", w, fmt::format("n={} k={} m={}{}", n, k, m, bias ? " bias" : ""), b, n * k * m > kSlowWork,
               [=](CaseEnv& e) -> Op {
                 MatMulOp op{e.random(DType::kF32, {n, k}), e.random(w, {m, k}), e.output(DType::kF32, {n, m})};
                 if (bias) op.bias = e.random(DType::kF32, {m});
                 return op;
               }});
        }
      }
    }
  }
  // Inf and NaN in the activations reach every output of their row.
  for (int64_t n : {1, 17}) {
    cases.push_back(
        {"matmul", DType::kF32, fmt::format("n={} k=64 m=32 inf+nan", n), kReduction, false, [=](CaseEnv& e) -> Op {
           std::vector<float> x(static_cast<size_t>(n * 64), 0.5f);
           x[3] = INFINITY;
           if (n > 1) x[64 + 5] = NAN;
           return MatMulOp{e.values(DType::kF32, {n, 64}, x), e.random(DType::kF32, {32, 64}),
                           e.output(DType::kF32, {n, 32})};
         }});
  }
}

struct HeadConfig {
  int64_t n_heads, kv_heads;
};
std::vector<HeadConfig> head_configs() {
  std::vector<HeadConfig> out;
  for (int64_t kv : {1, 2}) {
    for (int64_t ratio : {1, 2, 7}) out.push_back({kv * ratio, kv});
  }
  return out;
}

void add_attention(std::vector<Case>& cases) {
  constexpr int64_t kBlockTokens = 16, kPoolLimit = 512;
  for (DType cache : kCacheTypes) {
    for (int64_t hd : {64, 128}) {
      for (HeadConfig h : head_configs()) {
        // Decode: b sequences, the longest holding `ctx` positions, the others random shorter ones.
        for (int64_t b : {1, 2, 3, 7, 16, 64}) {
          for (int64_t ctx : {1, 2, 17, 100, 511, 1000, 4096}) {
            const int64_t max_blocks = (ctx + kBlockTokens - 1) / kBlockTokens;
            const int64_t pool = std::max(max_blocks, std::min(kPoolLimit, b * max_blocks));
            const int64_t work = b * h.n_heads * ctx * hd * 2;
            const bool slow = work > kSlowWork || pool * kBlockTokens * h.kv_heads * hd > kSlowCache;
            cases.push_back({"attention_decode", cache,
                             fmt::format("b={} ctx<={} heads={}/{} head_dim={}", b, ctx, h.n_heads, h.kv_heads, hd),
                             kAttention, slow, [=](CaseEnv& e) -> Op {
                               std::vector<int32_t> lens(static_cast<size_t>(b)),
                                   tables(static_cast<size_t>(b * max_blocks));
                               for (int64_t i = 0; i < b; ++i) {
                                 lens[static_cast<size_t>(i)] =
                                     i == 0 ? static_cast<int32_t>(ctx)
                                            : static_cast<int32_t>(1 + e.rng().next_u32() % ctx);
                               }
                               // Blocks may be shared between sequences (as prefix caching does).
                               for (int32_t& t : tables) t = static_cast<int32_t>(e.rng().next_u32() % pool);
                               return AttentionDecodeOp{e.random(DType::kF32, {b, h.n_heads, hd}, 2.0f),
                                                        e.random(cache, {pool, kBlockTokens, h.kv_heads, hd}),
                                                        e.random(cache, {pool, kBlockTokens, h.kv_heads, hd}),
                                                        e.ints({b, max_blocks}, tables),
                                                        e.ints({b}, lens),
                                                        e.output(DType::kF32, {b, h.n_heads, hd})};
                             }});
          }
        }
        // Prefill: n new tokens of one sequence after `start` cached ones; blocks in shuffled order.
        for (int64_t n : {1, 3, 17, 64}) {
          for (int64_t start : {0, 31, 500}) {
            const int64_t blocks = (start + n + kBlockTokens - 1) / kBlockTokens;
            const int64_t work = n * h.n_heads * (start + n) * hd * 2;
            cases.push_back({"attention_prefill", cache,
                             fmt::format("n={} start={} heads={}/{} head_dim={}", n, start, h.n_heads, h.kv_heads, hd),
                             kAttention, work > kSlowWork, [=](CaseEnv& e) -> Op {
                               std::vector<int32_t> table(static_cast<size_t>(blocks));
                               std::iota(table.begin(), table.end(), 0);
                               for (size_t i = table.size(); i > 1; --i)
                                 std::swap(table[i - 1], table[e.rng().next_u32() % i]);
                               return AttentionPrefillOp{e.random(DType::kF32, {n, h.n_heads, hd}, 2.0f),
                                                         e.random(cache, {blocks + 1, kBlockTokens, h.kv_heads, hd}),
                                                         e.random(cache, {blocks + 1, kBlockTokens, h.kv_heads, hd}),
                                                         e.ints({blocks}, table),
                                                         e.output(DType::kF32, {n, h.n_heads, hd}),
                                                         static_cast<int32_t>(start)};
                             }});
          }
        }
      }
    }
    // Phi-3's heads of 96, one query head per kv head (the avx512 build's one-query kernels take them, 12 vectors a
    // row), short and past a key block, with a window once.
    for (int64_t ctx : {1, 17, 300, 1000}) {
      for (int32_t window : {0, 200}) {
        if (window > 0 && ctx < 300) continue;
        const int64_t b = 3, hd = 96, heads = 3, max_blocks = (ctx + kBlockTokens - 1) / kBlockTokens;
        const int64_t pool = b * max_blocks;
        cases.push_back(
            {"attention_decode", cache,
             fmt::format("b={} ctx<={} heads={}/{} head_dim={} window={}", b, ctx, heads, heads, hd, window),
             kAttention, false, [=](CaseEnv& e) -> Op {
               std::vector<int32_t> lens(static_cast<size_t>(b)), tables(static_cast<size_t>(b * max_blocks));
               for (int64_t i = 0; i < b; ++i)
                 lens[static_cast<size_t>(i)] = static_cast<int32_t>(i == 0 ? ctx : 1 + e.rng().next_u32() % ctx);
               std::iota(tables.begin(), tables.end(), 0);
               AttentionDecodeOp op{e.random(DType::kF32, {b, heads, hd}, 2.0f),
                                    e.random(cache, {pool, kBlockTokens, heads, hd}),
                                    e.random(cache, {pool, kBlockTokens, heads, hd}),
                                    e.ints({b, max_blocks}, tables),
                                    e.ints({b}, lens),
                                    e.output(DType::kF32, {b, heads, hd})};
               op.scores.window = window;
               return op;
             }});
      }
    }
    // Heads of 48 (stories15M) and 80 (Phi-2): a multiple of one 512-bit vector but not of 64, so the tiled prefill
    // ends each head with a partial pass (tile_values_all); short and past a key block, grouped.
    for (int64_t hd : {48, 80}) {
      if (hd % dtype_info(cache).block_elems != 0) continue;  // q8_0 / q4_0 rows are whole 32-element blocks
      for (int64_t start : {0, 300}) {
        const int64_t n = 17, heads = 4, kv = 2, blocks = (start + n + kBlockTokens - 1) / kBlockTokens;
        cases.push_back(
            {"attention_prefill", cache, fmt::format("n={} start={} heads={}/{} head_dim={}", n, start, heads, kv, hd),
             kAttention, false, [=](CaseEnv& e) -> Op {
               std::vector<int32_t> table(static_cast<size_t>(blocks));
               std::iota(table.begin(), table.end(), 0);
               return AttentionPrefillOp{
                   e.random(DType::kF32, {n, heads, hd}, 2.0f),     e.random(cache, {blocks, kBlockTokens, kv, hd}),
                   e.random(cache, {blocks, kBlockTokens, kv, hd}), e.ints({blocks}, table),
                   e.output(DType::kF32, {n, heads, hd}),           static_cast<int32_t>(start)};
             }});
      }
    }
    for (int64_t start : {0, 45, 300}) {  // its prefill: the same kernel per query
      const int64_t n = 17, hd = 96, heads = 3, blocks = (start + n + kBlockTokens - 1) / kBlockTokens;
      cases.push_back({"attention_prefill", cache,
                       fmt::format("n={} start={} heads={}/{} head_dim={}", n, start, heads, heads, hd), kAttention,
                       false, [=](CaseEnv& e) -> Op {
                         std::vector<int32_t> table(static_cast<size_t>(blocks));
                         std::iota(table.begin(), table.end(), 0);
                         return AttentionPrefillOp{e.random(DType::kF32, {n, heads, hd}, 2.0f),
                                                   e.random(cache, {blocks, kBlockTokens, heads, hd}),
                                                   e.random(cache, {blocks, kBlockTokens, heads, hd}),
                                                   e.ints({blocks}, table),
                                                   e.output(DType::kF32, {n, heads, hd}),
                                                   static_cast<int32_t>(start)};
                       }});
    }
    // The score options of Gemma and sliding-window families: an explicit scale, soft-capping (scores of
    // inputs scaled 2.0 reach the cap), windows shorter and longer than the context.
    for (int64_t hd : {64, 256}) {
      const HeadConfig h{4, 2};
      for (AttentionScores opt : {AttentionScores{0.0625f, 0.0f, 0}, AttentionScores{0.0625f, 5.0f, 0},
                                  AttentionScores{0.0f, 0.0f, 7}, AttentionScores{0.0625f, 5.0f, 40}}) {
        const std::string what = fmt::format("scale={} softcap={} window={}", opt.scale, opt.softcap, opt.window);
        for (int64_t ctx : {3, 100, 600}) {  // 600: past a key block (the long-context kernels)
          const int64_t b = 3, max_blocks = (ctx + kBlockTokens - 1) / kBlockTokens, pool = b * max_blocks;
          cases.push_back(
              {"attention_decode", cache, fmt::format("b={} ctx<={} heads=4/2 head_dim={} {}", b, ctx, hd, what),
               kAttention, false, [=](CaseEnv& e) -> Op {
                 std::vector<int32_t> lens(static_cast<size_t>(b)), tables(static_cast<size_t>(b * max_blocks));
                 for (int64_t i = 0; i < b; ++i)
                   lens[static_cast<size_t>(i)] = static_cast<int32_t>(i == 0 ? ctx : 1 + e.rng().next_u32() % ctx);
                 std::iota(tables.begin(), tables.end(), 0);
                 AttentionDecodeOp op{e.random(DType::kF32, {b, h.n_heads, hd}, 2.0f),
                                      e.random(cache, {pool, kBlockTokens, h.kv_heads, hd}),
                                      e.random(cache, {pool, kBlockTokens, h.kv_heads, hd}),
                                      e.ints({b, max_blocks}, tables),
                                      e.ints({b}, lens),
                                      e.output(DType::kF32, {b, h.n_heads, hd})};
                 op.scores = opt;
                 return op;
               }});
        }
        for (int64_t start : {0, 45}) {
          const int64_t n = 17, blocks = (start + n + kBlockTokens - 1) / kBlockTokens;
          cases.push_back({"attention_prefill", cache,
                           fmt::format("n={} start={} heads=4/2 head_dim={} {}", n, start, hd, what), kAttention, false,
                           [=](CaseEnv& e) -> Op {
                             std::vector<int32_t> table(static_cast<size_t>(blocks));
                             std::iota(table.begin(), table.end(), 0);
                             AttentionPrefillOp op{e.random(DType::kF32, {n, h.n_heads, hd}, 2.0f),
                                                   e.random(cache, {blocks, kBlockTokens, h.kv_heads, hd}),
                                                   e.random(cache, {blocks, kBlockTokens, h.kv_heads, hd}),
                                                   e.ints({blocks}, table),
                                                   e.output(DType::kF32, {n, h.n_heads, hd}),
                                                   static_cast<int32_t>(start)};
                             op.scores = opt;
                             return op;
                           }});
        }
      }
    }
    // Gemma 4's grouped decode: 8 query heads on one kv head of 256 or 512, contexts past one key block (the cpu
    // backend splits them into ranges across threads), with a window, soft-capping and sinks too; and 7 query heads
    // on each of 2 kv heads of 256 (the avx512 build's shared kernel takes heads of 256 two to four at a time), 3 and
    // 2 on each of 2 kv heads of 512 (the shared kernel's partial last chunk; the avx2 build's q4_0 pairs).
    for (auto [hd, h] : {std::pair{int64_t{256}, HeadConfig{8, 1}}, std::pair{int64_t{256}, HeadConfig{14, 2}},
                         std::pair{int64_t{512}, HeadConfig{8, 1}}, std::pair{int64_t{512}, HeadConfig{6, 2}},
                         std::pair{int64_t{512}, HeadConfig{4, 2}}}) {
      for (int64_t ctx : {300, 600, 1200}) {
        if (h.kv_heads == 2 && ctx == 600) continue;
        if (hd == 512 && ctx > 700) continue;  // past kSlowWork for the scalar reference
        for (int variant = 0; variant < 4; ++variant) {
          const int64_t b = ctx == 600 && hd == 256 ? 2 : 1;
          const int64_t max_blocks = (ctx + kBlockTokens - 1) / kBlockTokens, pool = b * max_blocks;
          const std::string what = variant == 0   ? "grouped"
                                   : variant == 1 ? "grouped window=512"
                                   : variant == 2 ? "grouped scale=0.0625 softcap=5"
                                                  : "grouped sinks";
          cases.push_back(
              {"attention_decode", cache,
               fmt::format("b={} ctx<={} heads={}/{} head_dim={} {}", b, ctx, h.n_heads, h.kv_heads, hd, what),
               kAttention, false, [=](CaseEnv& e) -> Op {
                 std::vector<int32_t> lens(static_cast<size_t>(b)), tables(static_cast<size_t>(b * max_blocks));
                 for (int64_t i = 0; i < b; ++i)
                   lens[static_cast<size_t>(i)] = static_cast<int32_t>(i == 0 ? ctx : ctx - 37);
                 std::iota(tables.begin(), tables.end(), 0);
                 AttentionDecodeOp op{e.random(DType::kF32, {b, h.n_heads, hd}, 2.0f),
                                      e.random(cache, {pool, kBlockTokens, h.kv_heads, hd}),
                                      e.random(cache, {pool, kBlockTokens, h.kv_heads, hd}),
                                      e.ints({b, max_blocks}, tables),
                                      e.ints({b}, lens),
                                      e.output(DType::kF32, {b, h.n_heads, hd})};
                 if (variant == 1) op.scores.window = 512;
                 if (variant == 2) op.scores = AttentionScores{0.0625f, 5.0f, 0};
                 if (variant == 3) op.sinks = e.random(DType::kF32, {h.n_heads}, 3.0f);
                 return op;
               }});
        }
      }
    }
    // Attention sinks (gpt-oss: one extra logit per head that takes probability and reads no value), alone and
    // with a sliding window, through every cpu path: one query per head (head_dim 64), the grouped tiles
    // (head_dim 256 with 4 query heads per kv head) and the scalar heads (head_dim 32).
    for (int64_t hd : {32, 64, 256}) {
      const HeadConfig h{8, 2};
      for (int32_t window : {0, 7}) {
        const std::string what = fmt::format("sinks window={}", window);
        for (int64_t ctx : {3, 100, 600}) {
          const int64_t b = 3, max_blocks = (ctx + kBlockTokens - 1) / kBlockTokens, pool = b * max_blocks;
          cases.push_back(
              {"attention_decode", cache, fmt::format("b={} ctx<={} heads=8/2 head_dim={} {}", b, ctx, hd, what),
               kAttention, false, [=](CaseEnv& e) -> Op {
                 std::vector<int32_t> lens(static_cast<size_t>(b)), tables(static_cast<size_t>(b * max_blocks));
                 for (int64_t i = 0; i < b; ++i)
                   lens[static_cast<size_t>(i)] = static_cast<int32_t>(i == 0 ? ctx : 1 + e.rng().next_u32() % ctx);
                 std::iota(tables.begin(), tables.end(), 0);
                 AttentionDecodeOp op{e.random(DType::kF32, {b, h.n_heads, hd}, 2.0f),
                                      e.random(cache, {pool, kBlockTokens, h.kv_heads, hd}),
                                      e.random(cache, {pool, kBlockTokens, h.kv_heads, hd}),
                                      e.ints({b, max_blocks}, tables),
                                      e.ints({b}, lens),
                                      e.output(DType::kF32, {b, h.n_heads, hd})};
                 op.scores.window = window;
                 op.sinks = e.random(DType::kF32, {h.n_heads}, 3.0f);
                 return op;
               }});
        }
        for (int64_t start : {0, 45}) {
          const int64_t n = 17, blocks = (start + n + kBlockTokens - 1) / kBlockTokens;
          cases.push_back({"attention_prefill", cache,
                           fmt::format("n={} start={} heads=8/2 head_dim={} {}", n, start, hd, what), kAttention, false,
                           [=](CaseEnv& e) -> Op {
                             std::vector<int32_t> table(static_cast<size_t>(blocks));
                             std::iota(table.begin(), table.end(), 0);
                             AttentionPrefillOp op{e.random(DType::kF32, {n, h.n_heads, hd}, 2.0f),
                                                   e.random(cache, {blocks, kBlockTokens, h.kv_heads, hd}),
                                                   e.random(cache, {blocks, kBlockTokens, h.kv_heads, hd}),
                                                   e.ints({blocks}, table),
                                                   e.output(DType::kF32, {n, h.n_heads, hd}),
                                                   static_cast<int32_t>(start)};
                             op.scores.window = window;
                             op.sinks = e.random(DType::kF32, {h.n_heads}, 3.0f);
                             return op;
                           }});
        }
      }
    }
    // KV writes to distinct random slots; the untouched slots must stay as they were.
    for (int64_t hd : {64, 128}) {
      for (int64_t kv : {1, 2, 4}) {
        for (int64_t n : {1, 3, 17, 64}) {
          cases.push_back({"kv_write", cache, fmt::format("n={} kv_heads={} head_dim={}", n, kv, hd), kExact, false,
                           [=](CaseEnv& e) -> Op {
                             const int64_t blocks = (n + 5) / kBlockTokens + 2, slots = blocks * kBlockTokens;
                             std::vector<int32_t> all(static_cast<size_t>(slots));
                             std::iota(all.begin(), all.end(), 0);
                             for (size_t i = all.size(); i > 1; --i) std::swap(all[i - 1], all[e.rng().next_u32() % i]);
                             all.resize(static_cast<size_t>(n));
                             return KvWriteOp{e.random(DType::kF32, {n, kv, hd}), e.random(DType::kF32, {n, kv, hd}),
                                              e.output(cache, {blocks, kBlockTokens, kv, hd}),
                                              e.output(cache, {blocks, kBlockTokens, kv, hd}), e.ints({n}, all)};
                           }});
        }
      }
    }
  }
}

void add_rope(std::vector<Case>& cases) {
  for (RopeLayout layout : {RopeLayout::kInterleaved, RopeLayout::kHalf}) {
    for (int64_t hd : {64, 128}) {
      for (HeadConfig h : head_configs()) {
        for (int64_t n : {1, 3, 17, 64}) {
          for (float theta : {10000.0f, 1000000.0f}) {
            cases.push_back({"rope", DType::kF32,
                             fmt::format("{} n={} heads={}/{} head_dim={} theta={}",
                                         layout == RopeLayout::kInterleaved ? "interleaved" : "half", n, h.n_heads,
                                         h.kv_heads, hd, theta),
                             kTranscendental, false, [=](CaseEnv& e) -> Op {
                               std::vector<int32_t> pos(static_cast<size_t>(n));
                               for (int32_t& p : pos) p = static_cast<int32_t>(e.rng().next_u32() % 4096);
                               return RopeOp{e.output(DType::kF32, {n, h.n_heads, hd}),
                                             e.output(DType::kF32, {n, h.kv_heads, hd}), e.ints({n}, pos), theta,
                                             layout};
                             }});
          }
        }
      }
    }
  }
}

// Scaled rotary embeddings: an explicit table of per-pair frequencies (what linear, llama3, yarn and
// longrope reduce to) and a cos/sin multiplier.
void add_scaled_rope(std::vector<Case>& cases) {
  for (RopeLayout layout : {RopeLayout::kInterleaved, RopeLayout::kHalf}) {
    for (int64_t hd : {64, 128}) {
      for (float mscale : {1.0f, 1.19f}) {
        const int64_t n = 17;
        cases.push_back({"rope", DType::kF32,
                         fmt::format("{} n={} heads=4/2 head_dim={} freqs mscale={}",
                                     layout == RopeLayout::kInterleaved ? "interleaved" : "half", n, hd, mscale),
                         kTranscendental, false, [=](CaseEnv& e) -> Op {
                           std::vector<int32_t> pos(static_cast<size_t>(n));
                           for (int32_t& p : pos) p = static_cast<int32_t>(e.rng().next_u32() % 100000);
                           std::vector<float> f(static_cast<size_t>(hd / 2));
                           for (size_t j = 0; j < f.size(); ++j)
                             f[j] = std::pow(500000.0f, -2.0f * static_cast<float>(j) / static_cast<float>(hd)) /
                                    (1.0f + 31.0f * e.rng().next_f32());
                           RopeOp op{e.output(DType::kF32, {n, 4, hd}), e.output(DType::kF32, {n, 2, hd}),
                                     e.ints({n}, pos), 500000.0f, layout};
                           op.freqs = e.values(DType::kF32, {hd / 2}, f);
                           op.mscale = mscale;
                           return op;
                         }});
      }
    }
  }
}

// Rows of `width` values, optionally with NaN and +-Inf planted in the first row.
std::vector<float> row_values(CaseEnv& e, int64_t n, int64_t width, bool special, float scale = 1.0f) {
  std::vector<float> v(static_cast<size_t>(n * width));
  for (float& x : v) x = (e.rng().next_f32() * 2.0f - 1.0f) * scale;
  if (special) {
    v[0] = NAN;
    if (v.size() > 2) v[2] = INFINITY;
    if (v.size() > 3) v.back() = -INFINITY;
  }
  return v;
}

void add_rows(std::vector<Case>& cases) {
  for (int64_t n : {1, 2, 7, 64}) {
    for (int64_t dim : {64, 288, 768, 1000, 4096}) {
      for (float eps : {1e-5f, 1e-6f}) {
        cases.push_back({"rms_norm", DType::kF32, fmt::format("n={} dim={} eps={}", n, dim, eps), kReduction, false,
                         [=](CaseEnv& e) -> Op {
                           return RmsNormOp{e.random(DType::kF32, {n, dim}, 3.0f), e.random(DType::kF32, {dim}),
                                            e.output(DType::kF32, {n, dim}), eps};
                         }});
        cases.push_back({"add_rms_norm", DType::kF32, fmt::format("n={} dim={} eps={}", n, dim, eps), kReduction, false,
                         [=](CaseEnv& e) -> Op {
                           return AddRmsNormOp{e.output(DType::kF32, {n, dim}, 3.0f), e.random(DType::kF32, {n, dim}),
                                               e.random(DType::kF32, {dim}), e.output(DType::kF32, {n, dim}), eps};
                         }});
      }
    }
  }
  for (int64_t n : {1, 3}) {
    cases.push_back(
        {"rms_norm", DType::kF32, fmt::format("n={} dim=64 nan+inf", n), kReduction, false, [=](CaseEnv& e) -> Op {
           return RmsNormOp{e.values(DType::kF32, {n, 64}, row_values(e, n, 64, true)), e.random(DType::kF32, {64}),
                            e.output(DType::kF32, {n, 64})};
         }});
  }
  for (int64_t vocab : {512, 32000}) {
    for (int64_t dim : {64, 288, 768}) {
      for (int64_t n : {1, 7, 64}) {
        cases.push_back({"embedding", DType::kF32, fmt::format("n={} vocab={} dim={}", n, vocab, dim), kExact, false,
                         [=](CaseEnv& e) -> Op {
                           std::vector<int32_t> ids(static_cast<size_t>(n));
                           for (int32_t& id : ids) id = static_cast<int32_t>(e.rng().next_u32() % vocab);
                           ids.back() = static_cast<int32_t>(vocab - 1);
                           return EmbeddingOp{e.random(DType::kF32, {vocab, dim}), e.ints({n}, ids),
                                              e.output(DType::kF32, {n, dim})};
                         }});
        if (n != 7) continue;
        // Gemma's scaled lookup (one multiply per element in every backend).
        cases.push_back({"embedding", DType::kF32, fmt::format("n={} vocab={} dim={} scale=48", n, vocab, dim), kExact,
                         false, [=](CaseEnv& e) -> Op {
                           std::vector<int32_t> ids(static_cast<size_t>(n));
                           for (int32_t& id : ids) id = static_cast<int32_t>(e.rng().next_u32() % vocab);
                           return EmbeddingOp{e.random(DType::kF32, {vocab, dim}), e.ints({n}, ids),
                                              e.output(DType::kF32, {n, dim}), 48.0f};
                         }});
      }
    }
  }
  // Tables in their stored type: every looked-up row widened exactly as dequantize() does.
  for (DType w : kWeightTypes) {
    if (w == DType::kF32) continue;
    const int64_t dim = dtype_info(w).block_elems == kSuperBlockElems ? 768 : 288;
    for (int64_t n : {1, 7}) {
      cases.push_back(
          {"embedding", w, fmt::format("n={} vocab=512 dim={}", n, dim), kExact, false, [=](CaseEnv& e) -> Op {
             std::vector<int32_t> ids(static_cast<size_t>(n));
             for (int32_t& id : ids) id = static_cast<int32_t>(e.rng().next_u32() % 512);
             ids.back() = 511;
             return EmbeddingOp{e.random(w, {512, dim}), e.ints({n}, ids), e.output(DType::kF32, {n, dim}),
                                n == 7 ? 48.0f : 1.0f};
           }});
    }
  }
  for (int64_t n : {1, 3, 64}) {
    for (int64_t width : {1, 7, 172, 768, 2048, 5632}) {
      for (bool special : {false, true}) {
        if (special && width < 7) continue;
        const std::string shape = fmt::format("n={} width={}{}", n, width, special ? " nan+inf" : "");
        cases.push_back({"silu_mul", DType::kF32, shape, kTranscendental, false, [=](CaseEnv& e) -> Op {
                           return SiluMulOp{e.values(DType::kF32, {n, width}, row_values(e, n, width, special, 8.0f)),
                                            e.random(DType::kF32, {n, width}), e.output(DType::kF32, {n, width})};
                         }});
        cases.push_back({"silu_mul", DType::kF32, shape + " gelu_tanh", kTranscendental, false, [=](CaseEnv& e) -> Op {
                           return SiluMulOp{e.values(DType::kF32, {n, width}, row_values(e, n, width, special, 8.0f)),
                                            e.random(DType::kF32, {n, width}), e.output(DType::kF32, {n, width}),
                                            Activation::kGeluTanh};
                         }});
        if (n == 3 && !special) {
          // Gates out to +-150: e^-gate overflows f32 past -88.7, where silu and gelu give (minus) zero.
          for (Activation act : {Activation::kSilu, Activation::kGeluTanh}) {
            cases.push_back({"silu_mul", DType::kF32,
                             shape + (act == Activation::kSilu ? " gates to 150" : " gelu_tanh gates to 150"),
                             kTranscendental, false, [=](CaseEnv& e) -> Op {
                               return SiluMulOp{
                                   e.values(DType::kF32, {n, width}, row_values(e, n, width, false, 150.0f)),
                                   e.random(DType::kF32, {n, width}), e.output(DType::kF32, {n, width}), act};
                             }});
          }
        }
        cases.push_back({"add", DType::kF32, shape, kExact, false, [=](CaseEnv& e) -> Op {
                           return AddOp{e.values(DType::kF32, {n, width}, row_values(e, n, width, special)),
                                        e.random(DType::kF32, {n, width}), e.output(DType::kF32, {n, width})};
                         }});
        cases.push_back({"scale", DType::kF32, shape, kExact, false, [=](CaseEnv& e) -> Op {
                           return ScaleOp{e.values(DType::kF32, {n, width}, row_values(e, n, width, special)),
                                          e.output(DType::kF32, {n, width}), 0.70710678f};
                         }});
      }
    }
    for (int64_t m : {1, 2, 100, 512, 32000}) {
      for (bool special : {false, true}) {
        if (special && m < 100) continue;
        const std::string shape = fmt::format("n={} m={}{}", n, m, special ? " nan+inf" : "");
        cases.push_back({"softmax", DType::kF32, shape, kTranscendental, false, [=](CaseEnv& e) -> Op {
                           return SoftmaxOp{e.values(DType::kF32, {n, m}, row_values(e, n, m, special, 10.0f)),
                                            e.output(DType::kF32, {n, m})};
                         }});
        cases.push_back({"argmax", DType::kF32, shape, kExact, false, [=](CaseEnv& e) -> Op {
                           std::vector<float> v = row_values(e, n, m, false, 10.0f);
                           if (special && n > 1) v[static_cast<size_t>(m) + 1] = INFINITY;
                           return ArgmaxOp{e.values(DType::kF32, {n, m}, v), e.output(DType::kI32, {n}, 0.0f)};
                         }});
      }
    }
  }
}

}  // namespace

std::vector<Case> conformance_cases() {
  std::vector<Case> cases;
  add_matmul(cases);
  add_attention(cases);
  add_rope(cases);
  add_scaled_rope(cases);
  add_rows(cases);
  add_moe_cases(cases);
  add_encoder_cases(cases);
  add_linear_attention_cases(cases);
  return cases;
}

}  // namespace tessera::ops::conformance
