// The AMX tile instructions the amx build's matmuls use (matmul_amx.h: int8, matmul_amx_dense.h: bf16), as inline
// asm with their memory effects spelled out, and the per-thread tile configuration. Included only in the amx build
// (compiled with -mamx-tile -mamx-int8 -mamx-bf16), inside its namespace.
//
// Why not GCC 12's intrinsics: _tile_loadconfig does not tell the compiler that it reads its operand, so the stores
// that fill the configuration were dropped (the tiles were left unconfigured and the first tile load raised
// SIGILL); _tile_loadd names no memory at all (stores to what it reads may be moved after it); _tile_stored
// clobbers all memory (every addressable local, the accumulators included, was then kept on the stack).
// Here a store names what it writes, and a load reads memory its caller made visible with tile_sources_ready()
// after writing it.
#pragma once

#if defined(__AMX_TILE__)
#include <immintrin.h>

#include <cstdint>

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

}  // namespace tessera::ops::cpu::TS_CPU_ISA::tiles
#endif  // __AMX_TILE__
