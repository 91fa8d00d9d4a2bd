// Compiled once per kernel build (see kernels.h); measure_ceilings() in cpu_backend.cc picks the build (the amx
// build adds the tile products).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "ops/cpu/ceilings.h"
#include "ops/cpu/repack.h"
#include "ops/cpu/simd.h"

namespace tessera::ops::cpu::TS_CPU_ISA {
namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// One pass summing a[0, n). With `prefetch`, each 128 bytes read also fetches the two lines 16 KiB ahead into L2
// (as the k-quant decode does on AMD processors, where that streams faster than the hardware prefetcher alone).
float read_pass(const float* a, size_t n, int threads, bool prefetch) {
  float total = 0.0f;
#pragma omp parallel for num_threads(threads) reduction(+ : total) schedule(static)
  for (int64_t c = 0; c < static_cast<int64_t>(n / 4096); ++c) {
    const float* p = a + c * 4096;
#if defined(__AVX2__)
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (int i = 0; i < 4096; i += 32) {
      if (prefetch) {
        _mm_prefetch(reinterpret_cast<const char*>(p + i + 4096), _MM_HINT_T1);
        _mm_prefetch(reinterpret_cast<const char*>(p + i + 4096 + 16), _MM_HINT_T1);
      }
      s0 = _mm256_add_ps(s0, _mm256_load_ps(p + i));
      s1 = _mm256_add_ps(s1, _mm256_load_ps(p + i + 8));
      s2 = _mm256_add_ps(s2, _mm256_load_ps(p + i + 16));
      s3 = _mm256_add_ps(s3, _mm256_load_ps(p + i + 24));
    }
    total += hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
#else
    float s[8] = {};
    for (int i = 0; i < 4096; i += 8) {
      for (int j = 0; j < 8; ++j) s[j] += p[i + j];
    }
    for (float v : s) total += v;
#endif
  }
  return total;
}

void triad_pass(float* a, const float* b, const float* c, size_t n, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < static_cast<int64_t>(n); ++i) a[i] = b[i] + 3.0f * c[i];
}

// Runs body(iters) on every thread, each timing itself; the ceiling is the sum of the threads' rates, ops_per_iter
// operations per iteration (a descheduled thread then lowers only its own share).
template <typename Body>
double per_thread_rate(int threads, int64_t iters, double ops_per_iter, Body body) {
  double total = 0.0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
  {
    const double t0 = now();
    body(iters);
    total += static_cast<double>(iters) * ops_per_iter / (now() - t0);
  }
  return total;
}

volatile float g_sink = 0.0f;

// Twelve independent chains of one vector operation, in named variables: an array of accumulators (or an asm
// barrier on its elements) kept them on the stack, and each step then waited on a store and a load (the 512-bit
// FMA loop measured 34 GFLOP/s where the f16 GEMM itself ran 112).
#define TS_CHAINS12(STEP) \
  STEP(a0) STEP(a1) STEP(a2) STEP(a3) STEP(a4) STEP(a5) STEP(a6) STEP(a7) STEP(a8) STEP(a9) STEP(a10) STEP(a11)
#define TS_DECLARE12(V, init)                                                                                       \
  V a0 = init(0), a1 = init(1), a2 = init(2), a3 = init(3), a4 = init(4), a5 = init(5), a6 = init(6), a7 = init(7), \
    a8 = init(8), a9 = init(9), a10 = init(10), a11 = init(11)
#define TS_SUM12(add) \
  add(add(add(add(a0, a1), add(a2, a3)), add(add(a4, a5), add(a6, a7))), add(add(a8, a9), add(a10, a11)))

// f32 FMA of the build's widest vector: twelve chains cover the latency on both FMA pipes.
double fma_rate(int threads, int64_t iters) {
#if defined(__AVX512F__)
  return per_thread_rate(threads, iters, 12.0 * 16 * 2, [](int64_t n) {
    const __m512 m = _mm512_set1_ps(0.999999f), add = _mm512_set1_ps(1e-7f);
    const float seed = static_cast<float>(omp_get_thread_num()) * 1e-3f;
    auto init = [seed](int j) { return _mm512_set1_ps(seed + static_cast<float>(j) * 1e-4f); };
    TS_DECLARE12(__m512, init);
    for (int64_t i = 0; i < n; ++i) {
#define TS_STEP(a) a = _mm512_fmadd_ps(a, m, add);
      TS_CHAINS12(TS_STEP)
#undef TS_STEP
    }
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, TS_SUM12(_mm512_add_ps));  // (not _mm512_reduce_add_ps: GCC 12 warns inside it)
    g_sink = g_sink + lanes[0];
  });
#elif defined(__AVX2__)
  return per_thread_rate(threads, iters, 12.0 * 8 * 2, [](int64_t n) {
    const __m256 m = _mm256_set1_ps(0.999999f), add = _mm256_set1_ps(1e-7f);
    const float seed = static_cast<float>(omp_get_thread_num()) * 1e-3f;
    auto init = [seed](int j) { return _mm256_set1_ps(seed + static_cast<float>(j) * 1e-4f); };
    TS_DECLARE12(__m256, init);
    for (int64_t i = 0; i < n; ++i) {
#define TS_STEP(a) a = _mm256_fmadd_ps(a, m, add);
      TS_CHAINS12(TS_STEP)
#undef TS_STEP
    }
    g_sink = g_sink + hsum(TS_SUM12(_mm256_add_ps));
  });
#else
  return per_thread_rate(threads, iters / 4, 80.0 * 2, [](int64_t n) {
    float a[80];
    for (int j = 0; j < 80; ++j) a[j] = static_cast<float>(j) * 1e-3f;
    for (int64_t i = 0; i < n; ++i) {
      for (int j = 0; j < 80; ++j) a[j] = a[j] * 0.999999f + 1e-7f;
    }
    float s = 0.0f;
    for (float v : a) s += v;
    g_sink = g_sink + s;
  });
#endif
}

// int8 dot products as the quantised kernels run them: 512-bit vpdpbusd (64 multiply-adds each), or AVX2's
// maddubs + madd (32 multiply-adds into int32 per pair); twelve independent chains.
double int8_rate(int threads, int64_t iters) {
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  return per_thread_rate(threads, iters, 12.0 * 64 * 2, [](int64_t n) {
    const __m512i x = _mm512_set1_epi32(0x01020304), y = _mm512_set1_epi32(0x05060708 + omp_get_thread_num());
    auto init = [](int j) { return _mm512_set1_epi32(j); };
    TS_DECLARE12(__m512i, init);
    for (int64_t i = 0; i < n; ++i) {
#define TS_STEP(a) a = _mm512_dpbusd_epi32(a, x, y);
      TS_CHAINS12(TS_STEP)
#undef TS_STEP
    }
    alignas(64) int32_t lanes[16];
    _mm512_store_si512(lanes, TS_SUM12(_mm512_add_epi32));
    g_sink = g_sink + static_cast<float>(lanes[0]);
  });
#elif defined(__AVX2__)
  return per_thread_rate(threads, iters, 12.0 * 32 * 2, [](int64_t n) {
    const __m256i x = _mm256_set1_epi32(0x01020304 + omp_get_thread_num()), one = _mm256_set1_epi16(1);
    auto init = [](int j) { return _mm256_set1_epi32(0x05060708 + j); };
    TS_DECLARE12(__m256i, init);
    for (int64_t i = 0; i < n; ++i) {
// maddubs of the chain's own bytes: with two constants the compiler hoisted the products out of the loop.
#define TS_STEP(a) a = _mm256_add_epi32(a, _mm256_madd_epi16(_mm256_maddubs_epi16(x, a), one));
      TS_CHAINS12(TS_STEP)
#undef TS_STEP
    }
    g_sink = g_sink + static_cast<float>(hsum_epi32(TS_SUM12(_mm256_add_epi32)));
  });
#else
  (void)threads, (void)iters;
  return 0.0;
#endif
}

#if defined(__AMX_INT8__) && defined(__AMX_BF16__)
// Tile products: A tiles 0-1 (16 x 64 bytes), B tiles 2-3 (16 x 64), four independent C tiles 4-7 (each
// instruction waits for its own C only). ldtilecfg through inline asm, as in matmul_amx.h.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
template <bool kBf16>
double amx_rate(int threads, int64_t iters) {
  // Per instruction 16 x 16 x 64 int8 multiply-adds, or 16 x 16 x 32 bf16 ones.
  const double ops = 4.0 * 16 * 16 * (kBf16 ? 32 : 64) * 2;
  return per_thread_rate(threads, iters, ops, [](int64_t n) {
    TileConfig c;
    for (int t = 0; t < 8; ++t) {
      c.rows[t] = 16;
      c.colsb[t] = 64;
    }
    asm volatile("ldtilecfg %0" : : "m"(c));
    alignas(64) static const uint8_t a[16 * 64] = {1}, b[16 * 64] = {2};
    alignas(64) int32_t out[16 * 16];
    _tile_loadd(0, a, 64);
    _tile_loadd(1, a, 64);
    _tile_loadd(2, b, 64);
    _tile_loadd(3, b, 64);
    _tile_zero(4);
    _tile_zero(5);
    _tile_zero(6);
    _tile_zero(7);
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (kBf16) {
        _tile_dpbf16ps(4, 0, 2);
        _tile_dpbf16ps(5, 0, 3);
        _tile_dpbf16ps(6, 1, 2);
        _tile_dpbf16ps(7, 1, 3);
      } else {
        _tile_dpbssd(4, 0, 2);
        _tile_dpbssd(5, 0, 3);
        _tile_dpbssd(6, 1, 2);
        _tile_dpbssd(7, 1, 3);
      }
    }
    _tile_stored(4, out, 64);
    _tile_release();
    g_sink = g_sink + static_cast<float>(out[0]);
  });
}
#endif

}  // namespace

Ceilings measure(int threads, size_t bytes) {
  const size_t n = std::max<size_t>(bytes / sizeof(float) / 4096, 1) * 4096;
  // Host memory paged as the weights are (CpuBuffer: 2 MiB aligned, transparent huge pages on request), so the read
  // ceiling streams the page size the decode streams.
  auto ab = CpuBuffer::create(n * sizeof(float)), bb = CpuBuffer::create(n * sizeof(float)),
       cb = CpuBuffer::create(n * sizeof(float));
  Ceilings out;
  if (!ab.ok() || !bb.ok() || !cb.ok()) return out;
  auto* a = static_cast<float*>((*ab)->host_ptr());
  auto* b = static_cast<float*>((*bb)->host_ptr());
  auto* c = static_cast<float*>((*cb)->host_ptr());
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < static_cast<int64_t>(n); ++i) {  // the passes' values
    a[i] = 1.0f;
    b[i] = 2.0f;
    c[i] = 0.5f;
  }
  volatile float keep = 0.0f;
  // The read ceiling is the faster of the plain pass and the prefetching one, whichever this processor prefers.
  for (int rep = 0; rep < 5; ++rep) {
    for (bool prefetch : {false, true}) {
      const double t0 = now();
      keep = keep + read_pass(a, n, threads, prefetch);
      const double t1 = now();
      out.read_bytes_per_s = std::max(out.read_bytes_per_s, static_cast<double>(n * sizeof(float)) / (t1 - t0));
    }
    const double t1 = now();
    triad_pass(a, b, c, n, threads);
    const double t2 = now();
    out.triad_bytes_per_s = std::max(out.triad_bytes_per_s, 3.0 * static_cast<double>(n * sizeof(float)) / (t2 - t1));
  }
  const int64_t iters = 5'000'000;
  for (int rep = 0; rep < 3; ++rep) {
    out.fma_flops_per_s = std::max(out.fma_flops_per_s, fma_rate(threads, iters));
    out.int8_dot_ops_per_s = std::max(out.int8_dot_ops_per_s, int8_rate(threads, iters));
  }
#if defined(__AMX_INT8__) && defined(__AMX_BF16__)
  // The amx build is only called where amx_status() granted the tiles.
  for (int rep = 0; rep < 3; ++rep) {
    out.amx_int8_ops_per_s = std::max(out.amx_int8_ops_per_s, amx_rate<false>(threads, iters / 4));
    out.amx_bf16_flops_per_s = std::max(out.amx_bf16_flops_per_s, amx_rate<true>(threads, iters / 4));
  }
#endif
#if defined(__AVX512F__)
  out.fma_kind = "512-bit vfmadd";
#elif defined(__AVX2__)
  out.fma_kind = "256-bit vfmadd";
#else
  out.fma_kind = "scalar";
#endif
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  out.int8_dot_kind = "512-bit vpdpbusd";
#elif defined(__AVX2__)
  out.int8_dot_kind = "256-bit vpmaddubsw + vpmaddwd";
#else
  out.int8_dot_kind = "none";
#endif
  return out;
}

}  // namespace tessera::ops::cpu::TS_CPU_ISA
