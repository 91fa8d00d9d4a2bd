// The cpu backend gives every activation row the same bits whatever batch it arrives in: decode batches are
// padded to graph buckets, and a single sequence must not change its greedy output because others joined it.
// Every weight type, including a partial pair of blocks (the scalar tail of the 32-element kernels).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "base/quant.h"
#include "base/rng.h"
#include "ops/backend.h"
#include "ops/cpu/cpu_backend.h"
#include "ops/cpu_isas.h"
#include "ops/registry.h"

namespace tessera::ops {
namespace {

class CpuMatMul : public ::testing::TestWithParam<DType> {
 protected:
  // Every kernel variant this processor runs (avx512, avx2, generic): each has its own decode and batch paths.
  void open(cpu::Isa isa) {
    buffers_.clear();
    auto b = cpu::create_backend(isa);
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    backend_ = std::move(b).value();
    auto d = backend_->open_device_with(0, DeviceOptions{2, ""});
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    device_ = std::move(d).value();
    stream_ = device_->create_stream();
  }
  Tensor make(DType dtype, std::initializer_list<int64_t> shape, const void* data) {
    Tensor t(nullptr, 0, dtype, shape);
    auto b = device_->alloc(t.bytes());
    EXPECT_TRUE(b.ok());
    t.buffer = b->get();
    buffers_.push_back(std::move(b).value());
    if (data) {
      EXPECT_TRUE(stream_->upload(t, data).ok());
    }
    return t;
  }
  std::vector<float> matmul(const std::vector<float>& x, int64_t n, int64_t k, const Tensor& w, int64_t m) {
    Tensor xt = make(DType::kF32, {n, k}, x.data());
    Tensor out = make(DType::kF32, {n, m}, nullptr);
    EXPECT_TRUE(stream_->run(MatMulOp{xt, w, out}).ok());
    std::vector<float> got(static_cast<size_t>(n * m));
    EXPECT_TRUE(stream_->download(out, got.data()).ok());
    return got;
  }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Device> device_;
  std::unique_ptr<Stream> stream_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
};

TEST_P(CpuMatMul, EachRowHasTheSameBitsInEveryBatchSize) {
  const DType dtype = GetParam();
  for (cpu::Isa isa : cpu_isas_under_test()) {
    open(isa);
    SCOPED_TRACE(std::string(cpu::isa_name(isa)));
    // 37 weight rows (a partial tile of four), k = 5 quant blocks = 160: an odd block and, for the dense
    // kernels, a 16-wide main loop with no 8-wide remainder; k = 168 adds the 8-wide and scalar tails.
    // K-quants: 1 and 2 super-blocks. k = 173 (dense only): a 16-wide loop, the 8-wide and a 5-element tail.
    // k = 1192 and 1197 (dense only): rows the avx2 tile takes in blocks of 512 (matmul_dense.cc), the last one
    // short, with the 8-wide remainder and (1197) a scalar tail after it.
    for (int64_t k :
         {int64_t{160}, int64_t{168}, int64_t{173}, int64_t{256}, int64_t{512}, int64_t{1192}, int64_t{1197}}) {
      const int block = dtype_info(dtype).block_elems;
      if (k % block != 0 || (block == 1 && k % 32 == 0 && k > 200)) continue;
      const int64_t m = 37, n = 20;  // 20 rows: more than one tile of tokens, and past any library-gemm cutoff
      Rng rng(7 + static_cast<uint64_t>(k));
      std::vector<float> w(static_cast<size_t>(m * k)), x(static_cast<size_t>(n * k));
      for (float& v : w) v = rng.next_f32() * 2.0f - 1.0f;
      for (float& v : x) v = rng.next_f32() * 2.0f - 1.0f;
      std::vector<uint8_t> stored(dtype_bytes(dtype, w.size()));
      ASSERT_TRUE(quantize(w, dtype, stored.data()).ok());
      Tensor wt = make(dtype, {m, k}, stored.data());
      std::vector<float> batched = matmul(x, n, k, wt, m);
      // And the batch is right: against the stored weights widened to f32 (activations are quantised to 8 bits).
      std::vector<float> wf(w.size());
      ASSERT_TRUE(dequantize(stored.data(), dtype, wf).ok());
      double err = 0, sig = 0;
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t i = 0; i < m; ++i) {
          double want = 0;
          for (int64_t j = 0; j < k; ++j) want += double(wf[i * k + j]) * x[r * k + j];
          const double got = batched[r * m + i];
          err += (got - want) * (got - want);
          sig += want * want;
        }
      }
      EXPECT_LT(err / sig, 2e-3) << dtype_name(dtype) << " k=" << k;
      for (int64_t r = 0; r < n; ++r) {
        std::vector<float> row(x.begin() + r * k, x.begin() + (r + 1) * k);
        std::vector<float> alone = matmul(row, 1, k, wt, m);
        EXPECT_EQ(0, std::memcmp(alone.data(), batched.data() + r * m, static_cast<size_t>(m) * sizeof(float)))
            << dtype_name(dtype) << " k=" << k << " row " << r << " differs between batch 1 and batch " << n;
      }
    }
  }
}

// Expert layers too: a row's output is the same whether its experts ran one per thread (a lone decode row: eight
// experts, a few rows each) or split across the threads one after another (a batch where some expert has many
// rows), with the weights as loaded (repacked where the device repacks them).
TEST_P(CpuMatMul, ExpertLayersGiveEachRowTheSameBitsInEveryBatchSize) {
  const DType dtype = GetParam();
  const int block = dtype_info(dtype).block_elems;
  const int64_t dim = 256, ff = 256, experts = 6, k = 4, n = 48;  // 48 rows x 4 slots over 6 experts: ~32 each
  for (cpu::Isa isa : cpu_isas_under_test()) {
    open(isa);
    SCOPED_TRACE(std::string(cpu::isa_name(isa)));
    Rng rng(23);
    auto weights = [&](int64_t rows, int64_t cols) {
      std::vector<float> w(static_cast<size_t>(experts * rows * cols));
      for (float& v : w) v = (rng.next_f32() * 2.0f - 1.0f) * 0.2f;
      std::vector<uint8_t> stored(dtype_bytes(dtype, w.size()));
      EXPECT_TRUE(quantize(w, dtype, stored.data()).ok());
      Tensor t = make(dtype, {experts, rows, cols}, stored.data());
      EXPECT_TRUE(device_->prepare_matmul_weight(t).ok());
      return t;
    };
    ASSERT_EQ(dim % block, 0);
    const Tensor gate = weights(ff, dim), up = weights(ff, dim), down = weights(dim, ff);
    std::vector<float> x(static_cast<size_t>(n * dim)), w(static_cast<size_t>(n * k));
    std::vector<int32_t> ids(static_cast<size_t>(n * k));
    for (float& v : x) v = rng.next_f32() * 2.0f - 1.0f;
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t j = 0; j < k; ++j) {  // k distinct experts per row
        ids[static_cast<size_t>(r * k + j)] = static_cast<int32_t>((r + (r % 2 ? experts - j : j)) % experts);
        w[static_cast<size_t>(r * k + j)] = rng.next_f32();
      }
    }
    auto run = [&](int64_t first, int64_t rows) {
      MoeExpertsOp op;
      op.x = make(DType::kF32, {rows, dim}, x.data() + first * dim);
      op.ids = make(DType::kI32, {rows, k}, ids.data() + first * k);
      op.weights = make(DType::kF32, {rows, k}, w.data() + first * k);
      op.gate = gate;
      op.up = up;
      op.down = down;
      op.out = make(DType::kF32, {rows, dim}, nullptr);
      EXPECT_TRUE(stream_->run(op).ok());
      std::vector<float> got(static_cast<size_t>(rows * dim));
      EXPECT_TRUE(stream_->download(op.out, got.data()).ok());
      return got;
    };
    const std::vector<float> batched = run(0, n);
    for (int64_t r = 0; r < n; r += 7) {
      const std::vector<float> alone = run(r, 1);
      EXPECT_EQ(0, std::memcmp(alone.data(), batched.data() + r * dim, static_cast<size_t>(dim) * sizeof(float)))
          << dtype_name(dtype) << " row " << r << " differs between batch 1 and batch " << n;
    }
  }
}

// RMS norms too (plain and fused with the residual add): the vector builds sum a batch's rows side by side, one
// row per lane, and a lone row alone; each row must come out with the same bits either way, for whole groups of
// rows, a partial group, and row lengths with and without a vector tail.
class CpuNorm : public CpuMatMul {};
TEST_F(CpuNorm, EachRowHasTheSameBitsInEveryBatchSize) {
  for (cpu::Isa isa : cpu::runnable_isas()) {
    open(isa);
    SCOPED_TRACE(std::string(cpu::isa_name(isa)));
    for (int64_t k : {int64_t{64}, int64_t{173}, int64_t{768}}) {
      const int64_t n = 37;  // two groups of 16 (four of 8) and a partial one
      Rng rng(11 + static_cast<uint64_t>(k));
      std::vector<float> x(static_cast<size_t>(n * k)), d(x.size()), w(static_cast<size_t>(k));
      for (float& v : x) v = (rng.next_f32() * 2.0f - 1.0f) * 3.0f;
      for (float& v : d) v = rng.next_f32() * 2.0f - 1.0f;
      for (float& v : w) v = rng.next_f32() + 0.5f;
      const Tensor wt = make(DType::kF32, {k}, w.data());
      auto run = [&](int64_t r0, int64_t rows, bool add) {
        Tensor xt = make(DType::kF32, {rows, k}, x.data() + r0 * k);
        Tensor dt = make(DType::kF32, {rows, k}, d.data() + r0 * k);
        Tensor out = make(DType::kF32, {rows, k}, nullptr);
        const Status s =
            add ? stream_->run(AddRmsNormOp{xt, dt, wt, out, 1e-5f}) : stream_->run(RmsNormOp{xt, wt, out, 1e-5f});
        EXPECT_TRUE(s.ok()) << s.to_string();
        std::vector<float> got(static_cast<size_t>(2 * rows * k));
        EXPECT_TRUE(stream_->download(out, got.data()).ok());
        EXPECT_TRUE(stream_->download(xt, got.data() + rows * k).ok());  // the updated residual
        return got;
      };
      for (bool add : {false, true}) {
        const std::vector<float> batched = run(0, n, add);
        double err = 0, sig = 0;
        for (int64_t r = 0; r < n; ++r) {
          // Against the definition in double: (x (+ d)) / sqrt(mean((x (+ d))^2) + eps) * w.
          double ss = 0;
          for (int64_t j = 0; j < k; ++j) {
            const double v = double(x[r * k + j]) + (add ? double(d[r * k + j]) : 0.0);
            ss += v * v;
          }
          const double inv = 1.0 / std::sqrt(ss / double(k) + 1e-5);
          for (int64_t j = 0; j < k; ++j) {
            const double v = double(x[r * k + j]) + (add ? double(d[r * k + j]) : 0.0);
            const double want = v * inv * w[j], got = batched[r * k + j];
            err += (got - want) * (got - want);
            sig += want * want;
          }
          const std::vector<float> alone = run(r, 1, add);
          EXPECT_EQ(0, std::memcmp(alone.data(), batched.data() + r * k, static_cast<size_t>(k) * sizeof(float)))
              << (add ? "add_rms_norm" : "rms_norm") << " k=" << k << " row " << r << " differs between batch 1 and "
              << n;
        }
        EXPECT_LT(err / sig, 1e-12) << (add ? "add_rms_norm" : "rms_norm") << " k=" << k;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Weights, CpuMatMul,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0,
                                           DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ2_K, DType::kQ3_K,
                                           DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kMXFP4),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace tessera::ops
