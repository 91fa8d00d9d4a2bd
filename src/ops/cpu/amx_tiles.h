// The AMX tile instructions the amx builds' matmuls use (matmul_amx.h: int8, matmul_amx_dense.h: bf16) and the
// per-thread tile configuration. Included only in the two tile builds, inside their namespaces: the amx build
// (compiled with -mamx-tile -mamx-int8 -mamx-bf16) runs them on the tile unit, as inline asm with their memory effects
// spelled out; the amx_emulated build (TS_AMX_EMULATED, no AMX flags) carries each one out in software, so that the
// same kernels run, and are tested, on a processor without tiles.
//
// Why not GCC 12's intrinsics: _tile_loadconfig does not tell the compiler that it reads its operand, so the stores
// that fill the configuration were dropped (the tiles were left unconfigured and the first tile load raised
// SIGILL); _tile_loadd names no memory at all (stores to what it reads may be moved after it); _tile_stored
// clobbers all memory (every addressable local, the accumulators included, was then kept on the stack).
// Here a store names what it writes, and a load reads memory its caller made visible with tile_sources_ready()
// after writing it.
#pragma once

#if defined(__AMX_TILE__) || defined(TS_AMX_EMULATED)
#include <cstdint>
#if defined(__AMX_TILE__)
#include <immintrin.h>
#else
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#endif

namespace tessera::ops::cpu::TS_CPU_ISA::tiles {

// The 64-byte operand of ldtilecfg: palette 1, then per tile register its bytes per row and its rows.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
  void set(int tile, int rows_, int bytes_per_row) {
    rows[tile] = static_cast<uint8_t>(rows_);
    colsb[tile] = static_cast<uint16_t>(bytes_per_row);
  }
};

#if defined(__AMX_TILE__)
// Configures this thread's tiles on entry, releases them on exit (a released tile state is what the kernel saves
// cheaply at a context switch, and lets the core sleep deeper). Tile configuration is per thread.
class TileScope {
 public:
  explicit TileScope(const TileConfig& c) { asm volatile("ldtilecfg %0" : : "m"(c)); }
  ~TileScope() { asm volatile("tilerelease" ::); }
  TileScope(const TileScope&) = delete;
  TileScope& operator=(const TileScope&) = delete;
};

inline void tile_sources_ready() { asm volatile("" : : : "memory"); }

template <int kT>
inline void tile_load(const void* base, int64_t stride) {
  asm volatile("tileloadd (%0,%1,1), %%tmm%c2" : : "r"(base), "r"(stride), "i"(kT));
}
template <int kT>
inline void tile_zero() {
  asm volatile("tilezero %%tmm%c0" : : "i"(kT));
}
// C += A . B: int8 x int8 into int32 (tdpbssd), bf16 pairs into f32 (tdpbf16ps).
template <int kC, int kA, int kB>
inline void tile_dp_int8() {
  asm volatile("tdpbssd %%tmm%c0, %%tmm%c1, %%tmm%c2" : : "i"(kB), "i"(kA), "i"(kC));
}
template <int kC, int kA, int kB>
inline void tile_dp_bf16() {
  asm volatile("tdpbf16ps %%tmm%c0, %%tmm%c1, %%tmm%c2" : : "i"(kB), "i"(kA), "i"(kC));
}
// A 16 x 16 tile of 4-byte values into `c` (64 bytes per row, contiguous): the compiler sees exactly c written.
template <int kT, typename T>
inline void tile_store(T (&c)[256]) {
  static_assert(sizeof(T) == 4);
  asm volatile("tilestored %%tmm%c2, (%1,%3,1)" : "=m"(c) : "r"(c), "i"(kT), "r"(int64_t{64}));
}
// The same into rows `stride` bytes apart of memory the compiler cannot name (the matmul's output).
template <int kT>
inline void tile_store_rows(void* base, int64_t stride) {
  asm volatile("tilestored %%tmm%c1, (%0,%2,1)" : : "r"(base), "i"(kT), "r"(stride) : "memory");
}

#else
// The tile unit in software: eight tile registers of 16 rows of 64 bytes per thread, configured by TileScope as
// ldtilecfg configures them (a tile's rows and bytes per row; unconfigured bytes read as zero), with the arithmetic
// of the instructions (Intel SDM, TDPBSSD / TDPBF16PS): int8 products summed exactly into wrapping int32 sums; bf16
// pairs multiplied exactly in f32 and added to the sum one product after the other, rounded to nearest, with
// denormal inputs and results flushed to zero. The unit's own order of f32 additions is not documented (the real one
// differs from any sequence of FMAs, matmul_amx_dense.h), so f32 sums may differ from it in the last bits; int8 ones
// are exact in both. What the processor refuses (#UD: an instruction before ldtilecfg, a tile not configured, shapes
// that do not fit: C's rows not A's, A's bytes per row not 4 x B's rows, B's not C's) stops the process with the
// reason, as SIGILL would.
namespace soft {
struct Unit {
  bool configured = false;
  uint8_t rows[8] = {};
  uint16_t colsb[8] = {};
  alignas(64) uint8_t t[8][16][64] = {};
};
inline Unit& unit() {
  thread_local Unit u;
  return u;
}
[[noreturn]] inline void fault(const char* what, int tile) {
  std::fprintf(stderr, "amx_emulated: %s (tile %d): the tile unit would raise #UD here\n", what, tile);
  std::abort();
}
// Tile kT, configured; its rows and bytes per row.
inline Unit& configured(int tile) {
  Unit& u = unit();
  if (!u.configured) fault("a tile instruction before ldtilecfg", tile);
  if (u.rows[tile] == 0 || u.colsb[tile] == 0) fault("a tile that is not configured", tile);
  return u;
}
inline float flushed(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? 0.0f * x : x; }
inline float bf16_value(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float x;
  std::memcpy(&x, &bits, 4);
  return flushed(x);
}
}  // namespace soft

class TileScope {
 public:
  explicit TileScope(const TileConfig& c) {
    soft::Unit& u = soft::unit();
    if (c.palette != 1) soft::fault("ldtilecfg with a palette other than 1", -1);
    for (int t = 0; t < 16; ++t) {
      if (t >= 8 ? c.rows[t] != 0 || c.colsb[t] != 0 : c.rows[t] > 16 || c.colsb[t] > 64)
        soft::fault("ldtilecfg with a tile shape out of palette 1's bounds", t);
      if ((c.rows[t] == 0) != (c.colsb[t] == 0))
        soft::fault("ldtilecfg with a tile of rows and no bytes, or bytes and no rows", t);
    }
    u.configured = true;
    for (int t = 0; t < 8; ++t) {
      u.rows[t] = c.rows[t];
      u.colsb[t] = c.colsb[t];
    }
    std::memset(u.t, 0, sizeof u.t);  // ldtilecfg zeroes every tile
  }
  ~TileScope() {
    soft::Unit& u = soft::unit();
    u.configured = false;
    std::memset(u.rows, 0, sizeof u.rows);
    std::memset(u.colsb, 0, sizeof u.colsb);
  }
  TileScope(const TileScope&) = delete;
  TileScope& operator=(const TileScope&) = delete;
};

inline void tile_sources_ready() {}

template <int kT>
inline void tile_load(const void* base, int64_t stride) {
  soft::Unit& u = soft::configured(kT);
  std::memset(u.t[kT], 0, sizeof u.t[kT]);
  for (int r = 0; r < u.rows[kT]; ++r)
    std::memcpy(u.t[kT][r], static_cast<const uint8_t*>(base) + r * stride, u.colsb[kT]);
}
template <int kT>
inline void tile_zero() {
  soft::Unit& u = soft::configured(kT);
  std::memset(u.t[kT], 0, sizeof u.t[kT]);
}
// C, A and B configured, with shapes that fit; returns the unit.
template <int kC, int kA, int kB>
inline soft::Unit& product_shapes() {
  soft::configured(kA);
  soft::configured(kB);
  soft::Unit& u = soft::configured(kC);
  if (u.colsb[kC] % 4 != 0 || u.colsb[kA] % 4 != 0 || u.colsb[kB] % 4 != 0)
    soft::fault("a tile product with bytes per row not a multiple of 4", kC);
  if (u.rows[kC] != u.rows[kA]) soft::fault("a tile product whose C and A have other row counts", kC);
  if (u.colsb[kA] != 4 * u.rows[kB]) soft::fault("a tile product whose A's bytes per row are not 4 x B's rows", kA);
  if (u.colsb[kB] != u.colsb[kC]) soft::fault("a tile product whose B and C have other bytes per row", kB);
  return u;
}
// C += A . B: int8 x int8 into int32 (tdpbssd), bf16 pairs into f32 (tdpbf16ps).
template <int kC, int kA, int kB>
inline void tile_dp_int8() {
  soft::Unit& u = product_shapes<kC, kA, kB>();
  const int steps = u.colsb[kA] / 4, cols = u.colsb[kC] / 4;
  for (int m = 0; m < u.rows[kC]; ++m) {
    int32_t c[16];
    std::memcpy(c, u.t[kC][m], sizeof c);
    for (int n = 0; n < cols; ++n) {
      uint32_t sum = static_cast<uint32_t>(c[n]);
      for (int k = 0; k < steps; ++k) {
        for (int i = 0; i < 4; ++i) {
          const int32_t x = static_cast<int8_t>(u.t[kA][m][4 * k + i]), w = static_cast<int8_t>(u.t[kB][k][4 * n + i]);
          sum += static_cast<uint32_t>(x * w);
        }
      }
      c[n] = static_cast<int32_t>(sum);
    }
    std::memcpy(u.t[kC][m], c, sizeof c);
  }
}
template <int kC, int kA, int kB>
inline void tile_dp_bf16() {
  soft::Unit& u = product_shapes<kC, kA, kB>();
  const int steps = u.colsb[kA] / 4, cols = u.colsb[kC] / 4;
  for (int m = 0; m < u.rows[kC]; ++m) {
    float c[16];
    std::memcpy(c, u.t[kC][m], sizeof c);
    for (int k = 0; k < steps; ++k) {
      const float x0 = soft::bf16_value(&u.t[kA][m][4 * k]), x1 = soft::bf16_value(&u.t[kA][m][4 * k + 2]);
      for (int n = 0; n < cols; ++n) {
        // Each product is exact in f32 (8 significant bits times 8), so a fused or a separate add rounds the same.
        c[n] = soft::flushed(c[n] + x0 * soft::bf16_value(&u.t[kB][k][4 * n]));
        c[n] = soft::flushed(c[n] + x1 * soft::bf16_value(&u.t[kB][k][4 * n + 2]));
      }
    }
    std::memcpy(u.t[kC][m], c, sizeof c);
  }
}
// A 16 x 16 tile of 4-byte values into `c` (64 bytes per row, contiguous).
template <int kT, typename T>
inline void tile_store(T (&c)[256]) {
  static_assert(sizeof(T) == 4);
  soft::Unit& u = soft::configured(kT);
  for (int r = 0; r < u.rows[kT]; ++r) std::memcpy(reinterpret_cast<uint8_t*>(c) + 64 * r, u.t[kT][r], u.colsb[kT]);
}
// The same into rows `stride` bytes apart.
template <int kT>
inline void tile_store_rows(void* base, int64_t stride) {
  soft::Unit& u = soft::configured(kT);
  for (int r = 0; r < u.rows[kT]; ++r) std::memcpy(static_cast<uint8_t*>(base) + r * stride, u.t[kT][r], u.colsb[kT]);
}
#endif

}  // namespace tessera::ops::cpu::TS_CPU_ISA::tiles
#endif  // __AMX_TILE__ || TS_AMX_EMULATED
