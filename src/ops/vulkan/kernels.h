// The compute shaders of the vulkan backend (shaders/*.comp) as the host sees them: which SPIR-V blob, how
// many storage buffers, and the push-constant block each takes, mirrored field for field from the GLSL.
//
// Internal to src/ops/vulkan.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace tessera::ops::vulkan {

enum class Kernel : uint8_t {
  kEmbedding,
  kRmsNorm,
  kRope,
  kKvWrite,
  kAttention,
  kMatMulVec,
  kMatMulVecSubgroups,
  kMatMulTiled,
  kElementwise,
  kSoftmax,
  kArgmax,
  kMoeRoute,
  kMoeGateUp,
  kMoeDown,
  kSplitHeads,
  kCausalConv1d,
  kGatedDeltaRule,
  kLayerNorm,
  kAttentionNonCausal,
  kPool,
  kCount,
};

struct KernelSpec {
  std::string_view spirv;  // blob name (spirv.h)
  uint32_t bindings;       // storage buffers 0 .. bindings - 1
  uint32_t push_bytes;
  bool typed;  // specialised on a weight DType (constant_id 0)
};
const KernelSpec& kernel_spec(Kernel k);

// One SPIR-V module compiled from shaders/ at build time (generated vulkan_spirv.cc).
struct SpirvBlob {
  std::string_view name;
  const uint32_t* words;
  size_t count;
};
std::span<const SpirvBlob> spirv_blobs();

// Push constants; offsets are in elements of the binding's type unless marked as bytes.
struct EmbeddingPush {
  uint32_t table_off;  // bytes
  uint32_t ids_off, out_off, dim, vocab, n, row_bytes;
  float scale;
  uint32_t id_base, id_count, check;  // the table rows this dispatch binds; check: flag bad ids
};
struct RmsNormPush {
  uint32_t x_off, delta_off, w_off, out_off, dim, rows, add;
  float eps;
};
struct RopePush {
  uint32_t q_off, k_off, pos_off, freqs_off, q_heads, k_heads, head_dim, n, interleaved, use_mscale;
  float mscale;
  uint32_t rot;  // elements turned per head (partial rotary: rot_dims)
};
struct KvWritePush {
  uint32_t k_off, v_off, kc_off, vc_off, slots_off, row, capacity, n;
  uint32_t ctype;  // 0 f32, 1 f16, 2 bf16, 3 q8_0, 4 q4_0 (offsets in bytes for the last two)
};
struct AttentionPush {
  uint32_t q_off, kc_off, vc_off, tables_off, lens_off, out_off, table_stride, decode;
  int32_t start_pos;
  uint32_t max_ctx, n_heads, kv_heads, head_dim, block_tokens, num_blocks;
  float scale, softcap;
  int32_t window;
  uint32_t ctype, item_base, items;  // ctype as KvWritePush's
  uint32_t sinks_off, has_sinks;     // gpt-oss: one more logit per head (ops.h AttentionPrefillOp::sinks)
};
struct MatMulPush {
  uint32_t x_off, w_off, out_off, bias_off;  // w_off in bytes
  uint32_t has_bias, k, m, n, row_bytes;
  uint32_t out_stride;  // out's row length (m is the weight rows of this dispatch)
};
struct ElementwisePush {
  // op: 0 silu*mul, 1 gelu_tanh*mul, 2 add, 3 sigmoid gate, 4 scale, 5 silu, 6 gelu_tanh, 7 gelu_erf, 8 tanh
  uint32_t a_off, b_off, out_off, count, op;
  uint32_t a_per;  // elements of b per element of a (1, or a row for a per-row gate)
  float scale;     // op 4
};
struct LayerNormPush {
  uint32_t x_off, w_off, b_off, out_off, dim, rows, has_bias;
  float eps;
};
struct AttentionNonCausalPush {
  uint32_t q_off, k_off, v_off, out_off, n, heads, kv_heads, head_dim;
  float scale;
};
struct PoolPush {
  uint32_t x_off, out_off, n, dim, kind;  // kind: 0 mean, 1 first, 2 last
};
struct RowPush {  // softmax, argmax
  uint32_t x_off, out_off, m, rows;
};
struct SplitHeadsPush {
  uint32_t x_off, a_off, b_off, d, count;
};
struct CausalConv1dPush {
  uint32_t x_off, w_off, s_off, out_off, n, channels, taps, reset;
};
struct GatedDeltaRulePush {
  uint32_t qkv_off, alpha_off, beta_off, dt_off, a_off, s_off, out_off;
  uint32_t n, hv, s, hk, reset;
  float eps, scale;
};
struct MoeRoutePush {
  uint32_t l_off, b_off, ids_off, w_off, rows, experts, k;
  uint32_t gating;  // 0 softmax, 1 sigmoid, 2 softmax over the chosen
  uint32_t normalize, has_bias;
  float scale;
  uint32_t es_off, has_es;  // per-expert output scales (gemma4)
};
struct MoeGateUpPush {
  uint32_t x_off, ids_off, g_off, u_off;  // g_off, u_off in bytes
  uint32_t gb_off, ub_off, h_off, has_gb, has_ub;
  uint32_t row_base, rows, k, dim, ff, experts;
  uint32_t expert_bytes, row_bytes;
  uint32_t act;  // 0 silu, 1 gelu_tanh, 2 swiglu_oai
  float alpha, limit;
};
struct MoeDownPush {
  uint32_t h_off, ids_off, w_off, d_off;  // d_off in bytes
  uint32_t db_off, out_off, has_db;
  uint32_t row_base, rows, k, dim, ff, experts;
  uint32_t expert_bytes, row_bytes;
};

// Shapes the shaders are written for.
constexpr uint32_t kMatMulVecMaxRows = 8;       // matmul_vec.comp's NMAX
constexpr uint32_t kMatMulVecRowsPerGroup = 8;  // matmul_vec.comp's ROWS
constexpr uint32_t kMatMulTile = 32;            // matmul_tiled.comp's TM = TN
constexpr uint32_t kAttentionMaxHeadDim = 512;  // attention.comp's and attention_noncausal.comp's (64 x MAXD)
constexpr uint32_t kLinearWorkgroup = 64;       // local size of the one-invocation-per-item shaders

}  // namespace tessera::ops::vulkan
