// The amx kernel variant: it is offered exactly when the processor and Linux allow tiles, the tile permission
// covers threads that existed before it was granted, and its tiled quantised matmuls (batches of
// packed::kTileMinRows rows and more) give the vector kernels' bits and the reference's values. The matmul tests run
// on the tile unit where there is one and otherwise on the amx-emulated variant (the same kernels, the tiles in
// software: every AVX-512 host with AVX512-BF16 runs them); they skip, saying why, only where neither runs.
#include <gtest/gtest.h>

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/quant.h"
#include "base/rng.h"
#include "ops/backend.h"
#include "ops/cpu/amx.h"
#include "ops/cpu/ceilings.h"
#include "ops/cpu/cpu_backend.h"

// The software tile unit of the amx-emulated build, compiled here as that build compiles it (amx_tiles.h).
#define TS_AMX_EMULATED 1
#define TS_CPU_ISA soft_tiles_check
#include "ops/cpu/amx_tiles.h"
#undef TS_CPU_ISA
#undef TS_AMX_EMULATED

namespace tessera::ops {
namespace {

bool amx_runnable() {
  for (cpu::Isa i : cpu::runnable_isas()) {
    if (i == cpu::Isa::kAmx) return true;
  }
  return false;
}

// The variant the matmul tests run the amx kernels on: the tile unit where this host has one, else the tiles in
// software; nullopt where neither runs.
std::optional<cpu::Isa> tile_isa() {
  if (amx_runnable()) return cpu::Isa::kAmx;
  if (cpu::isa_supported(cpu::Isa::kAmxEmulated)) return cpu::Isa::kAmxEmulated;
  return std::nullopt;
}
#define TS_TILE_ISA_OR_SKIP(isa)                                                                           \
  const std::optional<cpu::Isa> isa = tile_isa();                                                          \
  if (!isa) GTEST_SKIP() << "neither AMX (" << cpu::amx_status().reason << ") nor AVX-512 with BF16 here"; \
  std::printf("[ amx ] on the %s kernels\n", std::string(cpu::isa_name(*isa)).c_str())

// A 16 x 64 by 64 x 16 int8 product on the tile unit, in a function compiled for it (the test binary is built
// for baseline x86-64): C[i][j] = sum_k a[i][k] * b[k][j], b given in the tiles' layout (row k / 4 holds
// elements 4 (k / 4) .. + 3 of each column j).
struct alignas(64) Config {
  uint8_t palette = 1, start = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
__attribute__((target("amx-tile,amx-int8"))) void tile_product(const int8_t* a, const int8_t* b_vnni, int32_t* c) {
  Config cfg;
  cfg.rows[0] = 16, cfg.colsb[0] = 64;  // A
  cfg.rows[1] = 16, cfg.colsb[1] = 64;  // B: 16 rows of 4-element groups
  cfg.rows[2] = 16, cfg.colsb[2] = 64;  // C
  asm volatile("ldtilecfg %0" : : "m"(cfg));
  _tile_loadd(0, a, 64);
  _tile_loadd(1, b_vnni, 64);
  _tile_zero(2);
  _tile_dpbssd(2, 0, 1);
  _tile_stored(2, c, 64);
  _tile_release();
}

TEST(CpuAmx, TheVariantIsOfferedExactlyWhenTheHostAllowsTiles) {
  const cpu::AmxStatus& s = cpu::amx_status();
  EXPECT_EQ(s.usable, s.reason.empty()) << s.reason;
  const bool avx512 = cpu::isa_supported(cpu::Isa::kAvx512);
  EXPECT_EQ(amx_runnable(), s.usable && avx512);
  if (!s.usable) {
    auto b = cpu::create_backend(cpu::Isa::kAmx);
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.status().code(), StatusCode::kFailedPrecondition);
    GTEST_SKIP() << "no AMX here: " << s.reason;
  }
  EXPECT_TRUE(cpu::cpu_reports_amx());
  auto b = cpu::create_backend(cpu::Isa::kAmx);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  auto d = (*b)->open_device_with(0, DeviceOptions{1, ""});
  ASSERT_TRUE(d.ok());
  EXPECT_NE((*d)->info().name.find("amx kernels"), std::string::npos) << (*d)->info().name;
}

// The permission is the process's: a thread that was already running when it was granted may use tiles.
TEST(CpuAmx, ThePermissionCoversThreadsStartedBeforeIt) {
  if (!cpu::cpu_reports_amx()) GTEST_SKIP() << "the processor reports no AMX";
  std::promise<bool> granted;
  std::vector<int32_t> c(256);
  std::vector<int8_t> a(16 * 64), b(16 * 64);
  Rng rng(3);
  for (auto& v : a) v = static_cast<int8_t>(static_cast<int>(rng.next_u32() % 255) - 127);
  for (auto& v : b) v = static_cast<int8_t>(static_cast<int>(rng.next_u32() % 255) - 127);
  std::thread worker([&, wait = granted.get_future()]() mutable {
    if (wait.get()) tile_product(a.data(), b.data(), c.data());
  });
  const cpu::AmxStatus& s = cpu::amx_status();  // the first request in this process when this test runs alone
  granted.set_value(s.usable);
  worker.join();
  if (!s.usable) GTEST_SKIP() << s.reason;
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) {
      int32_t want = 0;
      for (int k = 0; k < 64; ++k)
        want += a[static_cast<size_t>(i * 64 + k)] * b[static_cast<size_t>((k / 4) * 64 + j * 4 + k % 4)];
      EXPECT_EQ(c[static_cast<size_t>(i * 16 + j)], want) << i << "," << j;
    }
  }
}

namespace soft = cpu::soft_tiles_check::tiles;

// C = C0 + A . B on the software unit: A rows x k int8 (k bytes a row), B k x 16 in the tiles' layout (k / 4 rows of
// 64 bytes), C0 and C rows x 16 int32.
void soft_int8(const int8_t* a, const int8_t* b_vnni, const int32_t* c0, int32_t* c, int rows, int k) {
  soft::TileConfig cfg;
  cfg.set(0, rows, k);
  cfg.set(1, k / 4, 64);
  cfg.set(2, rows, 64);
  soft::TileScope scope(cfg);
  soft::tile_load<0>(a, k);
  soft::tile_load<1>(b_vnni, 64);
  soft::tile_load<2>(c0, 64);
  soft::tile_dp_int8<2, 0, 1>();
  int32_t out[256] = {};
  soft::tile_store<2>(out);
  std::memcpy(c, out, static_cast<size_t>(rows) * 16 * sizeof(int32_t));
}

// The amx-emulated build's tdpbssd: every int8 product summed exactly onto C, for whole tiles and for tiles of fewer
// rows and a shorter K, and (where this host has tiles) the tile unit's own sums.
TEST(SoftTiles, Int8ProductsAreTheExactSums) {
  Rng rng(17);
  std::vector<int8_t> a(16 * 64), b(16 * 64);
  std::vector<int32_t> c0(256), c(256);
  for (auto& v : a) v = static_cast<int8_t>(static_cast<int>(rng.next_u32() % 256) - 128);
  for (auto& v : b) v = static_cast<int8_t>(static_cast<int>(rng.next_u32() % 256) - 128);
  for (auto& v : c0) v = static_cast<int32_t>(rng.next_u32() % 2000001) - 1000000;
  for (auto [rows, k] : {std::pair{16, 64}, std::pair{5, 32}}) {
    soft_int8(a.data(), b.data(), c0.data(), c.data(), rows, k);
    for (int i = 0; i < rows; ++i) {
      for (int j = 0; j < 16; ++j) {
        int32_t want = c0[static_cast<size_t>(i * 16 + j)];
        for (int e = 0; e < k; ++e)
          want += a[static_cast<size_t>(i * k + e)] * b[static_cast<size_t>((e / 4) * 64 + j * 4 + e % 4)];
        EXPECT_EQ(c[static_cast<size_t>(i * 16 + j)], want) << rows << " x " << k << ": " << i << "," << j;
      }
    }
  }
  if (!cpu::amx_status().usable) return;
  std::vector<int32_t> zero(256, 0), tile_unit(256);
  soft_int8(a.data(), b.data(), zero.data(), c.data(), 16, 64);
  tile_product(a.data(), b.data(), tile_unit.data());
  EXPECT_EQ(c, tile_unit);
}

// tdpbf16ps: each pair's products added to C one after the other, bf16 denormals read as zero (DAZ), within f32
// rounding of the exact sums.
TEST(SoftTiles, Bf16ProductsAreAddedWithDenormalsAsZero) {
  auto bf16 = [](float x) {
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    return static_cast<uint16_t>(bits >> 16);  // truncated: these values are exact in bf16
  };
  Rng rng(23);
  std::vector<uint16_t> a(16 * 32), b(16 * 32);
  for (auto& v : a) v = bf16(static_cast<float>(static_cast<int>(rng.next_u32() % 255) - 127) / 64.0f);
  for (auto& v : b) v = bf16(static_cast<float>(static_cast<int>(rng.next_u32() % 255) - 127) / 32.0f);
  // Row 0 of A: the smallest denormal, then zeros; b[0] a large power of two: without DAZ C[0][0] would be 2^-33.
  std::fill(a.begin(), a.begin() + 32, uint16_t{0});
  a[0] = 0x0001;
  b[0] = bf16(0x1p100f);
  soft::TileConfig cfg;
  cfg.set(0, 16, 64);
  cfg.set(1, 16, 64);
  cfg.set(2, 16, 64);
  float c[256];
  {
    soft::TileScope scope(cfg);
    soft::tile_load<0>(a.data(), 64);
    soft::tile_load<1>(b.data(), 64);
    soft::tile_zero<2>();
    soft::tile_dp_bf16<2, 0, 1>();
    soft::tile_store<2>(c);
  }
  auto value = [](uint16_t h) {
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float x;
    std::memcpy(&x, &bits, 4);
    return std::fpclassify(x) == FP_SUBNORMAL ? 0.0 : static_cast<double>(x);
  };
  EXPECT_EQ(c[0], 0.0f) << "a denormal input was not read as zero";
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) {
      double want = 0, size = 0;
      for (int e = 0; e < 32; ++e) {
        const double p =
            value(a[static_cast<size_t>(i * 32 + e)]) * value(b[static_cast<size_t>((e / 2) * 32 + j * 2 + e % 2)]);
        want += p;
        size += std::abs(p);
      }
      EXPECT_NEAR(c[i * 16 + j], want, size * 1e-6 + 1e-30) << i << "," << j;
    }
  }
}

// What the tile unit refuses (#UD) stops the process with the reason, as SIGILL stops it on the tile unit: a tile
// instruction before ldtilecfg, a product whose shapes do not fit, a tile that is not configured.
TEST(SoftTilesDeathTest, WhatTheTileUnitRefusesStopsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(soft::tile_zero<0>(), "before ldtilecfg");
  soft::TileConfig cfg;
  cfg.set(0, 16, 64);
  cfg.set(1, 8, 64);  // B of 8 rows: A's 64 bytes a row need 16
  cfg.set(2, 16, 64);
  auto misshapen_product = [&] {
    soft::TileScope scope(cfg);
    soft::tile_dp_int8<2, 0, 1>();
  };
  auto unconfigured_tile = [&] {
    soft::TileScope scope(cfg);
    soft::tile_zero<5>();
  };
  EXPECT_DEATH(misshapen_product(), "4 x B's rows");
  EXPECT_DEATH(unconfigured_tile(), "not configured");
}

// `tessera bench generate` compares prefill with the peak of the instructions its matrix products run.
TEST(CpuCeilings, ThePrefillCeilingFollowsTheKernelsThatRun) {
  cpu::Ceilings c;
  c.fma_flops_per_s = 1e11;
  c.int8_dot_ops_per_s = 4e11;
  c.amx_int8_ops_per_s = 5e12;
  EXPECT_STREQ(cpu::matmul_ceiling(c, DType::kQ4_K, "amx (avx512f/bw/vl/dq+vnni+amx-int8)").what, "AMX int8");
  EXPECT_EQ(cpu::matmul_ceiling(c, DType::kQ8_0, "amx").ops_per_s, 5e12);
  EXPECT_STREQ(cpu::matmul_ceiling(c, DType::kQ8_0, "avx512 (avx512f/bw/vl/dq+vnni)").what, "int8 dot");
  EXPECT_STREQ(cpu::matmul_ceiling(c, DType::kQ8_0, "avx2 (avx2+fma+f16c)").what, "int8 dot");
  EXPECT_STREQ(cpu::matmul_ceiling(c, DType::kQ8_0, "generic").what, "f32 FMA");
  EXPECT_STREQ(cpu::matmul_ceiling(c, DType::kF16, "amx").what, "f32 FMA");
  EXPECT_STREQ(cpu::matmul_ceiling(c, DType::kF32, "avx512").what, "f32 FMA");
  c.amx_int8_ops_per_s = 0;  // not measured (no AMX here): the int8 dot peak
  EXPECT_STREQ(cpu::matmul_ceiling(c, DType::kQ8_0, "amx").what, "int8 dot");
}

// The measurement fills the peaks of the instructions the kernels this host runs use, and only those.
TEST(CpuCeilings, EveryComputePeakOfTheKernelsThatRunIsMeasured) {
  const cpu::Ceilings c = cpu::measure_ceilings(1, size_t{16} << 20);
  const std::string variant = cpu::detected_isa();
  EXPECT_GT(c.read_bytes_per_s, 0);
  EXPECT_GT(c.fma_flops_per_s, 0);
  EXPECT_EQ(c.int8_dot_ops_per_s > 0, variant != "generic") << variant << ": " << c.int8_dot_kind;
  EXPECT_EQ(c.amx_int8_ops_per_s > 0, variant.rfind("amx (", 0) == 0) << variant;
  EXPECT_EQ(c.amx_bf16_flops_per_s > 0, variant.rfind("amx (", 0) == 0) << variant;
  std::printf(
      "[ ceilings ] f32 FMA %.1f GFLOP/s (%s), int8 dot %.1f GOP/s (%s), AMX int8 %.1f GOP/s, AMX bf16 %.1f "
      "GFLOP/s\n",
      c.fma_flops_per_s / 1e9, c.fma_kind.c_str(), c.int8_dot_ops_per_s / 1e9, c.int8_dot_kind.c_str(),
      c.amx_int8_ops_per_s / 1e9, c.amx_bf16_flops_per_s / 1e9);
}

// Tiles against the same rows alone (quantised types: a batch of 1 runs the vector kernels; f16 / bf16 run on tiles
// at every batch size) and against the stored weights in f64, for every type the amx build puts on tiles, repacked
// and row-major, with partial panels (37 rows), partial tiles of activation rows, rows that are not whole tile
// steps (k = 200: the quantised types skip it) and a bias.
class CpuAmxMatMul : public ::testing::TestWithParam<DType> {};

TEST_P(CpuAmxMatMul, TilesGiveTheVectorKernelsBitsAndTheRightValues) {
  TS_TILE_ISA_OR_SKIP(isa);
  const DType dtype = GetParam();
  auto backend = cpu::create_backend(*isa);
  ASSERT_TRUE(backend.ok());
  auto device = (*backend)->open_device_with(0, DeviceOptions{2, ""});
  ASSERT_TRUE(device.ok());
  auto stream = (*device)->create_stream();
  std::vector<std::unique_ptr<Buffer>> keep;
  auto make = [&](DType t, std::initializer_list<int64_t> shape, const void* data) {
    Tensor x(nullptr, 0, t, shape);
    auto buf = (*device)->alloc(x.bytes());
    EXPECT_TRUE(buf.ok());
    x.buffer = buf->get();
    keep.push_back(std::move(buf).value());
    if (data) {
      EXPECT_TRUE(stream->upload(x, data).ok());
    }
    return x;
  };
  const int block = dtype_info(dtype).block_elems;
  for (int64_t k : {int64_t{256}, int64_t{768}, int64_t{200}}) {
    if (k % block != 0) continue;
    const int64_t m = 37, n = 41;
    Rng rng(5 + static_cast<uint64_t>(k));
    std::vector<float> w(static_cast<size_t>(m * k)), x(static_cast<size_t>(n * k)), bias(static_cast<size_t>(m));
    for (float& v : w) v = rng.next_f32() * 2.0f - 1.0f;
    for (float& v : x) v = rng.next_f32() * 2.0f - 1.0f;
    for (float& v : bias) v = rng.next_f32() - 0.5f;
    std::vector<uint8_t> stored(dtype_bytes(dtype, w.size()));
    ASSERT_TRUE(quantize(w, dtype, stored.data()).ok());
    std::vector<float> row_major;  // the batch's outputs from the row-major matrix, which the panels must repeat
    for (bool repack : {false, true}) {
      Tensor wt = make(dtype, {m, k}, stored.data());
      if (repack) {
        ASSERT_TRUE((*device)->prepare_matmul_weight(wt).ok());
      }
      Tensor bt = make(DType::kF32, {m}, bias.data());
      auto run = [&](const float* rows, int64_t count) {
        Tensor xt = make(DType::kF32, {count, k}, rows);
        Tensor out = make(DType::kF32, {count, m}, nullptr);
        EXPECT_TRUE(stream->run(MatMulOp{xt, wt, out, bt}).ok());
        std::vector<float> got(static_cast<size_t>(count * m));
        EXPECT_TRUE(stream->download(out, got.data()).ok());
        return got;
      };
      const std::vector<float> tiled = run(x.data(), n);
      if (!repack) {
        row_major = tiled;
      } else {
        EXPECT_EQ(0, std::memcmp(row_major.data(), tiled.data(), tiled.size() * sizeof(float)))
            << dtype_name(dtype) << " k=" << k << ": the panels give other bits than the row-major matrix";
      }
      std::vector<float> wf(w.size());
      ASSERT_TRUE(dequantize(stored.data(), dtype, wf).ok());
      double err = 0, sig = 0;
      for (int64_t r = 0; r < n; ++r) {
        const std::vector<float> alone = run(x.data() + r * k, 1);
        EXPECT_EQ(0, std::memcmp(alone.data(), tiled.data() + r * m, static_cast<size_t>(m) * sizeof(float)))
            << dtype_name(dtype) << " k=" << k << (repack ? " repacked" : "") << " row " << r;
        for (int64_t i = 0; i < m; ++i) {
          double want = bias[static_cast<size_t>(i)];
          for (int64_t j = 0; j < k; ++j) want += double(wf[i * k + j]) * x[r * k + j];
          const double d = tiled[r * m + i] - want;
          err += d * d;
          sig += want * want;
        }
      }
      // Dense weights: the conformance suite's bound for f32 activations (the activations are split into two
      // bf16 halves, not rounded to one); quantised ones: 8-bit activations.
      const bool dense = block == 1;
      std::printf("[ amx ] %s k=%lld%s: normalised squared error %.3g\n", std::string(dtype_name(dtype)).c_str(),
                  static_cast<long long>(k), repack ? " repacked" : "", err / sig);
      EXPECT_LT(err / sig, dense ? 1e-9 : 2e-3) << dtype_name(dtype) << " k=" << k;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Weights, CpuAmxMatMul,
                         ::testing::Values(DType::kF16, DType::kBF16, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0,
                                           DType::kQ5_1, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K,
                                           DType::kQ6_K),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// An f16 matrix prepared as decode-bound (the engine's classifier) keeps the f32 kernels on amx: its products have
// the avx512 build's bits for the same matrix at every batch size (the avx512 build keeps a decode-bound f16 matrix
// row-major too; without the hint it puts it in panels, whose sums are ordered otherwise), where the same matrix
// prepared without the hint takes the bf16 tiles (whose sums differ from the f32 kernels' in the last bits on some
// outputs).
TEST(CpuAmxMatMul, DecodeBoundF16MatrixKeepsTheF32Kernels) {
  TS_TILE_ISA_OR_SKIP(isa);
  const int64_t k = 256, m = 64, n = 20;
  Rng rng(11);
  std::vector<float> w(static_cast<size_t>(m * k)), x(static_cast<size_t>(n * k));
  for (float& v : w) v = rng.next_f32() * 2.0f - 1.0f;
  for (float& v : x) v = rng.next_f32() * 2.0f - 1.0f;
  std::vector<uint8_t> stored(dtype_bytes(DType::kF16, w.size()));
  ASSERT_TRUE(quantize(w, DType::kF16, stored.data()).ok());
  // out for the rows x[0, count) on `isa`, the matrix prepared with `hints`.
  auto products = [&](cpu::Isa isa, const WeightHints& hints, int64_t count) {
    auto backend = cpu::create_backend(isa);
    EXPECT_TRUE(backend.ok());
    auto device = (*backend)->open_device_with(0, DeviceOptions{1, ""});
    EXPECT_TRUE(device.ok());
    auto stream = (*device)->create_stream();
    auto wb = (*device)->alloc(stored.size());
    auto xb = (*device)->alloc(static_cast<size_t>(count * k) * sizeof(float));
    auto ob = (*device)->alloc(static_cast<size_t>(count * m) * sizeof(float));
    EXPECT_TRUE(wb.ok() && xb.ok() && ob.ok());
    Tensor wt(wb->get(), 0, DType::kF16, {m, k}), xt(xb->get(), 0, DType::kF32, {count, k});
    Tensor out(ob->get(), 0, DType::kF32, {count, m});
    EXPECT_TRUE(stream->upload(wt, stored.data()).ok());
    EXPECT_TRUE(stream->upload(xt, x.data()).ok());
    EXPECT_TRUE(stream->synchronize().ok());
    EXPECT_TRUE((*device)->prepare_matmul_weight(wt, hints).ok());
    EXPECT_TRUE(stream->run(MatMulOp{xt, wt, out}).ok());
    std::vector<float> got(static_cast<size_t>(count * m));
    EXPECT_TRUE(stream->download(out, got.data()).ok());
    return got;
  };
  WeightHints classifier;
  classifier.decode_bound = true;
  for (int64_t count : {int64_t{1}, n}) {
    const std::vector<float> f32_kernels = products(cpu::Isa::kAvx512, classifier, count);
    EXPECT_EQ(products(*isa, classifier, count), f32_kernels) << count << " rows";
    const std::vector<float> tiles = products(*isa, {}, count);
    size_t differ = 0;
    for (size_t i = 0; i < tiles.size(); ++i) differ += tiles[i] != f32_kernels[i];
    EXPECT_GT(differ, 0u) << count << " rows: the tiles gave the f32 kernels' bits everywhere (not on tiles?)";
  }
}

}  // namespace
}  // namespace tessera::ops
