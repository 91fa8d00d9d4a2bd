// Weight matrices repacked into panels at load (src/ops/cpu/repack.h): for q4_0, q5_0, mxfp4 and the k-quants, in every
// kernel build that repacks them, a matmul reading the panels gives the same bits as the same matmul on the row-major
// blocks, at every batch size (so a row's bits still do not depend on its batch), including rows past the last
// whole panel; bf16 and f16 panels of the avx512 build sum each output in element order, not in dot()'s, so there
// the panels' bits are checked against themselves across batch sizes and the sums against the exact products; the
// embedding lookup of a repacked (tied) table gives the stored rows; and nothing else can read a repacked buffer.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "base/quant.h"
#include "base/rng.h"
#include "ops/backend.h"
#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/repack.h"
#include "ops/cpu_isas.h"

namespace tessera::ops {
namespace {

struct Cpu {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Device> device;
  std::unique_ptr<Stream> stream;
  std::vector<std::unique_ptr<Buffer>> buffers;

  explicit Cpu(cpu::Isa isa) {
    auto b = cpu::create_backend(isa);
    EXPECT_TRUE(b.ok()) << b.status().to_string();
    backend = std::move(b).value();
    auto d = backend->open_device_with(0, DeviceOptions{2, ""});
    EXPECT_TRUE(d.ok()) << d.status().to_string();
    device = std::move(d).value();
    stream = device->create_stream();
  }
  Tensor make(DType dtype, std::initializer_list<int64_t> shape, const void* data) {
    Tensor t(nullptr, 0, dtype, shape);
    auto b = device->alloc(t.bytes());
    EXPECT_TRUE(b.ok());
    t.buffer = b->get();
    buffers.push_back(std::move(b).value());
    if (data) {
      EXPECT_TRUE(stream->upload(t, data).ok());
    }
    return t;
  }
  std::vector<float> matmul(const float* x, int64_t n, int64_t k, const Tensor& w, int64_t m, const Tensor& bias) {
    Tensor xt = make(DType::kF32, {n, k}, x);
    Tensor out = make(DType::kF32, {n, m}, nullptr);
    const Status s = stream->run(MatMulOp{xt, w, out, bias});
    EXPECT_TRUE(s.ok()) << s.to_string();
    std::vector<float> got(static_cast<size_t>(n * m));
    EXPECT_TRUE(stream->download(out, got.data()).ok());
    buffers.pop_back();
    buffers.pop_back();
    return got;
  }
};

// The panel height each build repacks with (0: it keeps every matrix row-major).
int panel_rows(cpu::Isa isa) {
  return isa == cpu::Isa::kAvx512 || cpu::uses_tiles(isa) ? 16 : isa == cpu::Isa::kAvx2 ? 8 : 0;
}

class CpuMatMulRepacked : public ::testing::TestWithParam<DType> {};

TEST_P(CpuMatMulRepacked, PanelsGiveTheRowMajorBitsAtEveryBatchSize) {
  const DType dtype = GetParam();
  const int block = dtype_info(dtype).block_elems;
  int tested = 0;
  for (cpu::Isa isa : cpu_isas_under_test()) {
    const int p = panel_rows(isa);
    if (!cpu::repackable(dtype, p, cpu::uses_tiles(isa))) continue;
    SCOPED_TRACE(std::string(cpu::isa_name(isa)));
    Cpu cpu(isa);
    // Whole panels only; a tail of 5 rows after them; k of an odd number of 32-blocks (288) or 1-2 super-blocks.
    struct Shape {
      int64_t m, k;
    };
    // bf16 / f16 also k past one of the avx512 panels' k blocks (1024), ending inside one (2112), and (not amx, whose
    // tiles take whole 32-element steps) an odd k.
    std::vector<Shape> shapes = block == 32  ? std::vector<Shape>{{48, 256}, {37, 288}, {p + 3, 64}}
                                : block == 1 ? std::vector<Shape>{{48, 256}, {37, 512}, {4 * p + 3, 2112}}
                                             : std::vector<Shape>{{48, 256}, {37, 512}};
    if (block == 1 && !cpu::uses_tiles(isa)) shapes.push_back({p + 5, 75});
    for (const Shape& sh : shapes) {
      const int64_t m = sh.m, k = sh.k;
      SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " " << m << " x " << k);
      Rng rng(11 + static_cast<uint64_t>(m * k));
      std::vector<float> w(static_cast<size_t>(m * k)), bias(static_cast<size_t>(m));
      for (float& v : w) v = rng.next_f32() * 2.0f - 1.0f;
      for (float& v : bias) v = rng.next_f32() - 0.5f;
      std::vector<uint8_t> stored(dtype_bytes(dtype, w.size()));
      ASSERT_TRUE(quantize(w, dtype, stored.data()).ok());
      const Tensor row_major = cpu.make(dtype, {m, k}, stored.data());
      const Tensor panels = cpu.make(dtype, {m, k}, stored.data());
      ASSERT_TRUE(cpu.device->prepare_matmul_weight(panels).ok());
      const cpu::PanelLayout* lay = cpu::panel_layout(panels);
      ASSERT_NE(lay, nullptr) << "not repacked";
      EXPECT_EQ(lay->panel_rows, p);
      // In place, and really rearranged (the row-major bytes are gone, the tail rows kept).
      const auto* bytes = static_cast<const uint8_t*>(panels.buffer->host_ptr());
      EXPECT_NE(0, std::memcmp(bytes, stored.data(), stored.size()));
      const size_t tail_at = static_cast<size_t>(m / p * p) * stored.size() / static_cast<size_t>(m);
      EXPECT_EQ(0, std::memcmp(bytes + tail_at, stored.data() + tail_at, stored.size() - tail_at));
      const Tensor bt = cpu.make(DType::kF32, {m}, bias.data());
      const int64_t n_max = 70;
      std::vector<float> x(static_cast<size_t>(n_max * k));
      for (float& v : x) v = rng.next_f32() * 2.0f - 1.0f;
      std::vector<float> wf(w.size());
      ASSERT_TRUE(dequantize(stored.data(), dtype, wf).ok());
      const std::vector<float> full = cpu.matmul(x.data(), n_max, k, panels, m, bt);
      // avx512 bf16 / f16 panels: their own summation order (matmul_dense_panels.h), f32 activations.
      const bool dense = block == 1, own_order = dense && !cpu::uses_tiles(isa);
      for (int64_t n : {1, 2, 3, 4, 5, 8, 9, 17, 64, 70}) {
        const std::vector<float> want = cpu.matmul(x.data(), n, k, row_major, m, bt);
        const std::vector<float> got = cpu.matmul(x.data(), n, k, panels, m, bt);
        if (!own_order) {
          EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float))) << "batch " << n;
        } else {
          // The rows past the last whole panel stay row-major, with the row-major bits.
          for (int64_t r = 0; r < n; ++r)
            for (int64_t i = m / p * p; i < m; ++i)
              EXPECT_EQ(want[r * m + i], got[r * m + i]) << "batch " << n << " row " << r << " tail output " << i;
        }
        EXPECT_EQ(0, std::memcmp(full.data(), got.data(), got.size() * sizeof(float)))
            << "batch " << n << " differs from the same rows in a batch of " << n_max;
        // The decode rows under either panel walk (the processor picks one; the bits must not depend on which).
        if (n <= 2) {
          for (cpu::PanelWalk walk : {cpu::PanelWalk::kPairs, cpu::PanelWalk::kOne}) {
            cpu::pin_kquant_decode_walk(walk);
            const std::vector<float> walked = cpu.matmul(x.data(), n, k, panels, m, bt);
            cpu::pin_kquant_decode_walk(std::nullopt);
            EXPECT_EQ(0, std::memcmp(walked.data(), got.data(), got.size() * sizeof(float)))
                << "batch " << n << ", walk " << (walk == cpu::PanelWalk::kOne ? "one stream" : "pairs");
          }
        }
        // And right: against the stored weights widened to f32 (quantised types: activations are quantised to 8
        // bits; dense ones: the conformance suite's bound for f32 activations).
        double err = 0, sig = 0;
        for (int64_t r = 0; r < n; ++r) {
          for (int64_t i = 0; i < m; ++i) {
            double ref = bias[static_cast<size_t>(i)];
            for (int64_t j = 0; j < k; ++j) ref += double(wf[i * k + j]) * x[r * k + j];
            const double d = got[r * m + i] - ref;
            err += d * d;
            sig += ref * ref;
          }
        }
        EXPECT_LT(err / sig, dense ? 1e-9 : 2e-3) << "batch " << n;
      }
      ++tested;
    }
  }
  if (tested == 0) GTEST_SKIP() << "no kernel build this processor runs repacks " << dtype_name(dtype);
}

// A tied classifier shares the embedding table, so the table is repacked too: the lookup must give the stored rows'
// bits, from whole panels and from the row-major tail.
TEST_P(CpuMatMulRepacked, TheEmbeddingLookupReadsARepackedTable) {
  const DType dtype = GetParam();
  int tested = 0;
  for (cpu::Isa isa : cpu_isas_under_test()) {
    const int p = panel_rows(isa);
    if (!cpu::repackable(dtype, p, cpu::uses_tiles(isa))) continue;
    SCOPED_TRACE(std::string(cpu::isa_name(isa)));
    Cpu cpu(isa);
    const int64_t vocab = 3 * p + 5, dim = 512;
    Rng rng(5);
    std::vector<float> w(static_cast<size_t>(vocab * dim));
    for (float& v : w) v = rng.next_f32() * 2.0f - 1.0f;
    std::vector<uint8_t> stored(dtype_bytes(dtype, w.size()));
    ASSERT_TRUE(quantize(w, dtype, stored.data()).ok());
    const Tensor row_major = cpu.make(dtype, {vocab, dim}, stored.data());
    const Tensor panels = cpu.make(dtype, {vocab, dim}, stored.data());
    ASSERT_TRUE(cpu.device->prepare_matmul_weight(panels).ok());
    ASSERT_NE(cpu::panel_layout(panels), nullptr);
    std::vector<int32_t> ids(static_cast<size_t>(vocab));
    for (int32_t i = 0; i < vocab; ++i) ids[static_cast<size_t>(i)] = (i * 7) % static_cast<int32_t>(vocab);
    const Tensor it = cpu.make(DType::kI32, {vocab}, ids.data());
    std::vector<float> want(static_cast<size_t>(vocab * dim)), got(want.size());
    for (auto [table, dst] : {std::pair{&row_major, &want}, std::pair{&panels, &got}}) {
      const Tensor out = cpu.make(DType::kF32, {vocab, dim}, nullptr);
      const Status s = cpu.stream->run(EmbeddingOp{*table, it, out, 0.5f});
      ASSERT_TRUE(s.ok()) << s.to_string();
      ASSERT_TRUE(cpu.stream->download(out, dst->data()).ok());
    }
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)));
    // An id outside the vocabulary is still refused.
    const int32_t bad = static_cast<int32_t>(vocab);
    const Tensor bt = cpu.make(DType::kI32, {1}, &bad);
    const Tensor o1 = cpu.make(DType::kF32, {1, dim}, nullptr);
    EXPECT_EQ(cpu.stream->run(EmbeddingOp{panels, bt, o1}).code(), StatusCode::kOutOfRange);
    ++tested;
  }
  if (tested == 0) GTEST_SKIP() << "no kernel build this processor runs repacks " << dtype_name(dtype);
}

INSTANTIATE_TEST_SUITE_P(Weights, CpuMatMulRepacked,
                         ::testing::Values(DType::kBF16, DType::kF16, DType::kQ4_0, DType::kQ5_0, DType::kQ4_K,
                                           DType::kQ5_K, DType::kQ6_K, DType::kQ2_K, DType::kQ3_K, DType::kMXFP4,
                                           DType::kQ4_1, DType::kQ5_1),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(CpuMatMulRepackedBuffer, OnlyAMatmulWeightMayReadIt) {
  const cpu::Isa isa = cpu::runnable_isas().front();
  if (panel_rows(isa) == 0) GTEST_SKIP() << "the generic build does not repack";
  Cpu cpu(isa);
  const int64_t m = 32, k = 256;
  std::vector<float> w(static_cast<size_t>(m * k), 0.25f);
  std::vector<uint8_t> stored(dtype_bytes(DType::kQ4_0, w.size()));
  ASSERT_TRUE(quantize(w, DType::kQ4_0, stored.data()).ok());
  const Tensor wt = cpu.make(DType::kQ4_0, {m, k}, stored.data());
  ASSERT_TRUE(cpu.device->prepare_matmul_weight(wt).ok());
  ASSERT_NE(cpu::panel_layout(wt), nullptr);

  // A download or an upload (and so a KV-style copy_runs transfer) would see or clobber rearranged bytes.
  std::vector<uint8_t> back(stored.size());
  Status s = cpu.stream->download(wt, back.data());
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.to_string();
  s = cpu.stream->upload(wt, stored.data());
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.to_string();

  // Any other operator on those bytes, e.g. the buffer read as f32 by an add, or as a matmul's activations.
  const Tensor as_f32(wt.buffer, 0, DType::kF32, {static_cast<int64_t>(stored.size() / 4)});
  const Tensor out = cpu.make(DType::kF32, {static_cast<int64_t>(stored.size() / 4)}, nullptr);
  s = cpu.stream->run(AddOp{as_f32, as_f32, out});
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.to_string();
  EXPECT_FALSE(cpu.device->supports(AddOp{as_f32, as_f32, out}).supported);

  // The weight under another shape than the one it was packed for.
  std::vector<float> x(static_cast<size_t>(2 * k), 1.0f);
  const Tensor xt = cpu.make(DType::kF32, {1, 2 * k}, x.data());
  const Tensor o1 = cpu.make(DType::kF32, {1, m / 2}, nullptr);
  const Tensor reshaped(wt.buffer, 0, DType::kQ4_0, {m / 2, 2 * k});
  s = cpu.stream->run(MatMulOp{xt, reshaped, o1});
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.to_string();

  // Another kernel build than the one that packed it (its panels have another height, or none).
  for (cpu::Isa other : cpu::runnable_isas()) {
    if (panel_rows(other) == panel_rows(isa)) continue;
    Cpu o(other);
    const Tensor x1 = o.make(DType::kF32, {1, k}, x.data());
    const Tensor out1 = o.make(DType::kF32, {1, m}, nullptr);
    s = o.stream->run(MatMulOp{x1, wt, out1});
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << cpu::isa_name(other) << ": " << s.to_string();
  }

  // The matmul itself: 0.25 * 1 * 256 per output.
  const Tensor x1 = cpu.make(DType::kF32, {1, k}, x.data());
  const Tensor out1 = cpu.make(DType::kF32, {1, m}, nullptr);
  ASSERT_TRUE(cpu.stream->run(MatMulOp{x1, wt, out1}).ok());
  std::vector<float> got(static_cast<size_t>(m));
  ASSERT_TRUE(cpu.stream->download(out1, got.data()).ok());
  for (float v : got) EXPECT_NEAR(v, 64.0f, 0.5f);
}

TEST(CpuMatMulRepackedBuffer, SmallAndUnsupportedMatricesStayRowMajor) {
  const cpu::Isa isa = cpu::runnable_isas().front();
  if (panel_rows(isa) == 0) GTEST_SKIP() << "the generic build does not repack";
  Cpu cpu(isa);
  const int p = panel_rows(isa);
  // Fewer rows than a panel; a type without a panel layout (q8_0, repack.h); an f32 matrix: all stay readable.
  for (const auto& [dtype, rows] : {std::pair{DType::kQ4_0, int64_t{p - 1}}, std::pair{DType::kQ8_0, int64_t{64}},
                                    std::pair{DType::kF32, int64_t{64}}}) {
    const Tensor t = cpu.make(dtype, {rows, 256}, nullptr);
    ASSERT_TRUE(cpu.device->prepare_matmul_weight(t).ok());
    EXPECT_EQ(cpu::panel_layout(t), nullptr) << dtype_name(dtype);
    std::vector<uint8_t> back(t.bytes());
    EXPECT_TRUE(cpu.stream->download(t, back.data()).ok()) << dtype_name(dtype);
  }
}

// A large matrix is repacked, its buffer zeroed and its upload copied over the device's threads (repack.h,
// kParallelHostBytes): the panels must be byte for byte those of the one-thread repack, for every matrix of a stack,
// and the upload's copy whole (a length that is no multiple of its 2 MiB pieces). (That the split zeroing covers every
// page is not observable here: a fresh allocation of this size is zero before it runs.)
std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng.next_u32() >> 24);
  return v;
}

TEST(CpuMatMulRepackedBuffer, RepackOverThreadsGivesTheOneThreadBytes) {
  const cpu::Isa isa = cpu::runnable_isas().front();
  if (panel_rows(isa) == 0) GTEST_SKIP() << "the generic build does not repack";
  const int p = panel_rows(isa);
  cpu::WorkerPool pool(2);
  for (DType dtype : {DType::kQ4_K, DType::kQ6_K, DType::kQ4_0, DType::kF16}) {
    const int64_t matrices = 3, rows = 5 * p + 3, cols = 512;  // rows past the last whole panel stay row-major
    const Tensor shape(nullptr, 0, dtype, {matrices, rows, cols});
    const std::vector<uint8_t> stored = random_bytes(shape.bytes(), 7);
    std::vector<uint8_t> panels[2];
    for (int threads : {1, 2}) {
      auto b = cpu::CpuBuffer::create(shape.bytes());
      ASSERT_TRUE(b.ok());
      std::memcpy((*b)->host_ptr(), stored.data(), stored.size());
      Tensor t = shape;
      t.buffer = b->get();
      ASSERT_TRUE(cpu::repack_matrix(t, p, false, threads == 2 ? &pool : nullptr).ok()) << dtype_name(dtype);
      ASSERT_NE(cpu::panel_layout(t), nullptr) << dtype_name(dtype);
      const auto* bytes = static_cast<const uint8_t*>((*b)->host_ptr());
      panels[threads - 1].assign(bytes, bytes + stored.size());
    }
    EXPECT_NE(panels[0], stored) << dtype_name(dtype);
    EXPECT_EQ(panels[1], panels[0]) << dtype_name(dtype);
  }
}

TEST(CpuMatMulRepackedBuffer, ALargeWeightLoadsOverTheDeviceThreads) {
  const cpu::Isa isa = cpu::runnable_isas().front();
  if (panel_rows(isa) == 0) GTEST_SKIP() << "the generic build does not repack";
  Cpu cpu(isa);  // 2 threads
  // q4_k [8192 x 4096]: 18.9 MB, over kParallelHostBytes.
  const Tensor shape(nullptr, 0, DType::kQ4_K, {8192, 4096});
  ASSERT_GE(shape.bytes(), cpu::kParallelHostBytes);
  const std::vector<uint8_t> stored = random_bytes(shape.bytes() + 2 * (size_t{1} << 20) / 3, 11);

  // The upload lands whole (read back before repacking).
  auto raw = cpu.device->alloc(stored.size());
  ASSERT_TRUE(raw.ok());
  ASSERT_TRUE(cpu.stream->write(**raw, 0, stored.data(), stored.size()).ok());
  std::vector<uint8_t> back(stored.size());
  ASSERT_TRUE(cpu.stream->read(**raw, 0, back.data(), back.size()).ok());
  EXPECT_EQ(back, stored);

  // The device's repack (over its threads) against the one-thread repack of the same bytes.
  const Tensor wt = cpu.make(DType::kQ4_K, {8192, 4096}, stored.data());
  ASSERT_TRUE(cpu.device->prepare_matmul_weight(wt).ok());
  ASSERT_NE(cpu::panel_layout(wt), nullptr);
  auto one = cpu::CpuBuffer::create(shape.bytes());
  ASSERT_TRUE(one.ok());
  std::memcpy((*one)->host_ptr(), stored.data(), shape.bytes());
  Tensor ref = shape;
  ref.buffer = one->get();
  ASSERT_TRUE(cpu::repack_matrix(ref, panel_rows(isa), cpu::uses_tiles(isa)).ok());
  EXPECT_EQ(std::memcmp(wt.buffer->host_ptr(), (*one)->host_ptr(), shape.bytes()), 0);
}

}  // namespace
}  // namespace tessera::ops
