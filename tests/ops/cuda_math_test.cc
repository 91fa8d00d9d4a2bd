// The cuda kernels' per-element and per-row arithmetic (src/ops/cuda/kernel_math.h) compiled for the host and
// compared with ops/ref on real inputs, bit for bit: the gated activations (silu, gelu_tanh, the sigmoid gate,
// gpt-oss's clamped SwiGLU), the ungated ones (gelu_erf included), the routing of one row, the causal convolution
// of one channel and the gated delta rule of one state row. On the device the same code runs with CUDA's expf,
// erff and logf and possibly fused multiply-adds, which the conformance bounds cover (scripts/gpu-check.sh runs
// that suite where a GPU exists); here the code paths themselves are checked against the oracle.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "base/quant.h"
#include "base/rng.h"
#include "ops/backend.h"
#include "ops/cuda/kernel_math.h"
#include "ops/moe_route.h"
#include "ops/ref/kernels.h"
#include "ops/registry.h"
#include "support/ref_device_test.h"

namespace tessera::ops::cuda {
namespace {

// Equal as bits (-0 differs from +0), or both NaN: which NaN an operation on a NaN gives depends on which operand
// the compiler put first, in ref as here.
bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0 || (std::isnan(a) && std::isnan(b)); }

std::vector<float> uniform(Rng& rng, size_t count, float scale) {
  std::vector<float> v(count);
  for (float& x : v) x = (rng.next_f32() * 2.0f - 1.0f) * scale;
  return v;
}

// Ordinary values at several scales, then the ones that take other branches: zeros, the clamp's edges, softplus's
// threshold, NaN, infinities and values large enough to overflow exp.
std::vector<float> probe_values() {
  Rng rng(11);
  std::vector<float> v;
  for (float scale : {0.01f, 1.0f, 8.0f, 40.0f, 200.0f}) {
    const std::vector<float> u = uniform(rng, 400, scale);
    v.insert(v.end(), u.begin(), u.end());
  }
  for (float x : {0.0f, -0.0f, 7.0f, -7.0f, 7.0001f, -7.0001f, 20.0f, 20.0001f, 88.0f, -88.0f, 100.0f, -100.0f, 1e-30f,
                  -1e-30f, NAN, INFINITY, -INFINITY})
    v.push_back(x);
  return v;
}

TEST(CudaMath, GatedActivationsMatchRefBitForBit) {
  const std::vector<float> vals = probe_values();
  Rng rng(3);
  int checked = 0;
  for (Activation act : {Activation::kSilu, Activation::kGeluTanh, Activation::kSigmoid, Activation::kSwigluOai}) {
    SCOPED_TRACE(static_cast<int>(act));
    for (float alpha : {1.702f, 0.5f}) {
      for (float limit : {7.0f, 1.5f}) {
        for (size_t i = 0; i < vals.size(); ++i) {
          const float g = vals[i], u = vals[(i * 7 + 3) % vals.size()] * (rng.next_f32() + 0.5f);
          const float want = ref::gated(act, g, u, alpha, limit);
          const float got = gated_value(static_cast<int>(act), g, u, alpha, limit);
          ASSERT_TRUE(same_bits(want, got)) << "g=" << g << " u=" << u << " alpha=" << alpha << " limit=" << limit
                                            << ": ref " << want << ", cuda " << got;
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 30000);
}

TEST(CudaMath, ActivationsMatchRefBitForBit) {
  for (Activation act : {Activation::kSilu, Activation::kGeluTanh, Activation::kGeluErf, Activation::kTanh}) {
    SCOPED_TRACE(static_cast<int>(act));
    for (float x : probe_values()) {
      const float want = ref::activate(act, x), got = activation_value(static_cast<int>(act), x);
      ASSERT_TRUE(same_bits(want, got)) << "x=" << x << ": ref " << want << ", cuda " << got;
    }
  }
}

// Every gating function with and without renormalisation, a selection bias, a scale and per-expert scales, on
// random rows, rows of ties, rows with NaN and rows where the bias reorders the experts; k from 1 to all experts.
TEST(CudaMath, RoutingOfOneRowMatchesRouteExpertsRow) {
  Rng rng(5);
  int rows = 0;
  for (MoeGating gating : {MoeGating::kSoftmax, MoeGating::kSigmoid, MoeGating::kSoftmaxWeight}) {
    for (int experts : {1, 4, 8, 32, 128}) {
      for (int k : {1, 2, 4, 8, 128}) {
        if (k > experts) continue;
        for (int variant = 0; variant < 8; ++variant) {
          const bool normalize = variant & 1, with_bias = variant & 2, with_scales = variant & 4;
          for (int kind = 0; kind < 4; ++kind) {  // random, all tied, NaN and ties mixed, tiny weights
            SCOPED_TRACE("gating " + std::to_string(static_cast<int>(gating)) + " experts " + std::to_string(experts) +
                         " k " + std::to_string(k) + " variant " + std::to_string(variant) + " kind " +
                         std::to_string(kind));
            std::vector<float> l = uniform(rng, static_cast<size_t>(experts), 3.0f);
            if (kind == 1) std::fill(l.begin(), l.end(), 0.5f);
            if (kind == 2) {
              for (int i = 0; i < experts; i += 3) l[static_cast<size_t>(i)] = i % 2 ? NAN : 1.25f;
            }
            if (kind == 3)
              for (float& v : l) v -= 30.0f;  // sigmoid weights near 1e-13: the renormalisation's clamp applies
            const std::vector<float> bias = uniform(rng, static_cast<size_t>(experts), 0.5f);
            const std::vector<float> scales = uniform(rng, static_cast<size_t>(experts), 2.0f);
            const float scale = variant == 6 ? 2.5f : 1.0f;
            std::vector<float> p(static_cast<size_t>(experts));
            std::vector<char> taken(static_cast<size_t>(experts));
            std::vector<int32_t> want_ids(static_cast<size_t>(k)), got_ids(static_cast<size_t>(k));
            std::vector<float> want_w(static_cast<size_t>(k)), got_w(static_cast<size_t>(k));
            route_experts_row(l.data(), experts, with_bias ? bias.data() : nullptr, k, gating, normalize, scale,
                              p.data(), taken.data(), want_ids.data(), want_w.data(),
                              with_scales ? scales.data() : nullptr);
            route_row(l.data(), experts, with_bias ? bias.data() : nullptr, k, static_cast<int>(gating), normalize,
                      scale, with_scales ? scales.data() : nullptr, got_ids.data(), got_w.data());
            ASSERT_EQ(want_ids, got_ids);
            for (int j = 0; j < k; ++j)
              ASSERT_TRUE(same_bits(want_w[static_cast<size_t>(j)], got_w[static_cast<size_t>(j)]))
                  << "slot " << j << ": ref " << want_w[static_cast<size_t>(j)] << ", cuda "
                  << got_w[static_cast<size_t>(j)];
            ++rows;
          }
        }
      }
    }
  }
  EXPECT_GT(rows, 1000);
}

// The two linear-attention operators run by ref (through its device) and, on copies of the same inputs, by the
// kernels' per-thread functions for every channel / state row, as the kernels' threads would.
class CudaMathRef : public testing::RefDeviceTest {
 protected:
  static void expect_same(const std::vector<float>& want, const std::vector<float>& got, const char* what) {
    ASSERT_EQ(want.size(), got.size()) << what;
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_TRUE(same_bits(want[i], got[i])) << what << "[" << i << "]: ref " << want[i] << ", cuda " << got[i];
  }
};

TEST_F(CudaMathRef, CausalConvolutionOfEachChannelMatchesRef) {
  Rng rng(17);
  for (int taps : {2, 4}) {
    for (int n : {1, 3, 9}) {
      for (bool reset : {false, true}) {
        SCOPED_TRACE("taps " + std::to_string(taps) + " n " + std::to_string(n) + (reset ? " reset" : ""));
        const int channels = 37, keep = taps - 1;
        const std::vector<float> x = uniform(rng, static_cast<size_t>(n * channels), 2.0f);
        const std::vector<float> w = uniform(rng, static_cast<size_t>(channels * taps), 1.0f);
        const std::vector<float> state = uniform(rng, static_cast<size_t>(keep * channels), 2.0f);
        CausalConv1dOp op{f32({n, channels}, x), f32({channels, taps}, w), f32({keep, channels}, state),
                          f32({n, channels}, std::vector<float>(static_cast<size_t>(n * channels))), reset};
        ASSERT_TRUE(stream_->run(op).ok());
        std::vector<float> got_state = state, got_out(static_cast<size_t>(n * channels));
        for (int c = 0; c < channels; ++c)
          conv_channel(x.data(), w.data(), got_state.data(), got_out.data(), n, channels, taps, reset, c);
        expect_same(get(op.out), got_out, "out");
        expect_same(get(op.state), got_state, "state");
      }
    }
  }
}

TEST_F(CudaMathRef, GatedDeltaRuleOfEachStateRowMatchesRef) {
  Rng rng(23);
  for (auto [hk, hv, s] : {std::tuple{1, 1, 8}, {2, 4, 16}, {2, 6, 32}}) {
    for (int n : {1, 5}) {
      for (bool reset : {false, true}) {
        SCOPED_TRACE("hk " + std::to_string(hk) + " hv " + std::to_string(hv) + " s " + std::to_string(s) + " n " +
                     std::to_string(n) + (reset ? " reset" : ""));
        const int width = (2 * hk + hv) * s;
        std::vector<float> qkv = uniform(rng, static_cast<size_t>(n * width), 1.5f);
        std::fill(qkv.begin(), qkv.begin() + s, 0.0f);  // a zero query: the eps floor of the l2 norm
        const std::vector<float> alpha = uniform(rng, static_cast<size_t>(n * hv), 12.0f);  // softplus's both sides
        const std::vector<float> beta = uniform(rng, static_cast<size_t>(n * hv), 3.0f);
        const std::vector<float> dt_bias = uniform(rng, static_cast<size_t>(hv), 12.0f);
        std::vector<float> a = uniform(rng, static_cast<size_t>(hv), 1.0f);
        for (float& v : a) v = -std::exp(v);
        const std::vector<float> state = uniform(rng, static_cast<size_t>(hv * s * s), 0.5f);
        GatedDeltaRuleOp op{f32({n, width}, qkv),
                            f32({n, hv}, alpha),
                            f32({n, hv}, beta),
                            f32({hv}, dt_bias),
                            f32({hv}, a),
                            f32({hv, s, s}, state),
                            f32({n, hv, s}, std::vector<float>(static_cast<size_t>(n * hv * s))),
                            hk,
                            1e-6f,
                            reset};
        ASSERT_TRUE(stream_->run(op).ok());
        std::vector<float> got_state = state, got_out(static_cast<size_t>(n * hv * s));
        for (int h = 0; h < hv; ++h)
          for (int j = 0; j < s; ++j)
            delta_rule_row(qkv.data(), alpha.data(), beta.data(), dt_bias.data(), a.data(),
                           got_state.data() + (static_cast<size_t>(h) * s + j) * s, got_out.data(), n, hv, hk, s, 1e-6f,
                           reset, h, j);
        expect_same(get(op.out), got_out, "out");
        expect_same(get(op.state), got_state, "state");
      }
    }
  }
}

// The KV cache conversions of kv_write / attention (bf16, f16, q8_0 and q4_0 blocks) against base/quant, byte for
// byte: every f16 value widened, conversions of ordinary, tie, tiny, huge and special values, and blocks of random
// values at several scales plus blocks whose products land on halves (lround's ties) and q4_0's +8.5 edges.
TEST(CudaMath, KvCacheConversionsMatchBaseQuantByteForByte) {
  for (uint32_t h = 0; h < 65536; ++h) {
    ASSERT_TRUE(same_bits(from_f16(static_cast<uint16_t>(h)), f16_to_f32(static_cast<uint16_t>(h)))) << h;
  }
  std::vector<float> v = probe_values();
  for (float x : {6.1035156e-05f, 5.9604645e-08f, 2.9802322e-08f, 65504.0f, 65520.0f, 1.0009766f, 1.0004883f, -0.0f})
    v.push_back(x);
  for (float x : v) {
    EXPECT_EQ(to_f16(x), f32_to_f16(x)) << x;
    EXPECT_EQ(to_bf16(x), f32_to_bf16(x)) << x;
    EXPECT_TRUE(same_bits(from_bf16(to_bf16(x)), bf16_to_f32(f32_to_bf16(x)))) << x;
  }
  Rng rng(23);
  std::vector<std::vector<float>> blocks;
  for (float scale : {1e-3f, 1.0f, 30.0f, 1e4f})
    for (int i = 0; i < 50; ++i) blocks.push_back(uniform(rng, 32, scale));
  for (int i = 0; i < 20; ++i) {  // amax 127 * 0.5: x * id lands on k + 0.5 for half-integers
    std::vector<float> b(32);
    for (int j = 0; j < 32; ++j) b[static_cast<size_t>(j)] = static_cast<float>(j - 16) + 0.5f;
    b[static_cast<size_t>(i)] = 127.0f;
    blocks.push_back(b);
  }
  blocks.push_back(std::vector<float>(32, 0.0f));
  for (const std::vector<float>& b : blocks) {
    for (DType t : {DType::kQ8_0, DType::kQ4_0}) {
      const bool q8 = t == DType::kQ8_0;
      std::vector<uint8_t> want(static_cast<size_t>(q8 ? 34 : 18)), got(want.size());
      ASSERT_TRUE(quantize(b, t, want.data()).ok());
      if (q8) {
        quantize_block_q8_0(b.data(), got.data());
      } else {
        quantize_block_q4_0(b.data(), got.data());
      }
      ASSERT_EQ(got, want) << dtype_name(t) << " block starting " << b[0];
      std::vector<float> wide(32);
      ASSERT_TRUE(dequantize(want.data(), t, wide).ok());
      for (int j = 0; j < 32; ++j) {
        ASSERT_TRUE(same_bits(block_elem(got.data(), j, q8), wide[static_cast<size_t>(j)]))
            << dtype_name(t) << " " << j;
      }
    }
  }
}

}  // namespace
}  // namespace tessera::ops::cuda
