// The quantised matmuls on AMX tiles (the amx build only): batches of kTileMinRows activation rows or more, for
// every type whose rows-in-lanes kernels (matmul_packed.h, matmul_repacked.h) exist. Included by matmul_quant.cc
// and matmul_kquant.cc after those two headers, inside the same per-build namespace.
//
// The tile unit multiplies a 16 x K int8 matrix A by a K x 16 int8 matrix B into 16 x 16 int32 sums C
// (tdpbssd), K up to 64, at 1024 multiply-adds per cycle on paper (about 8x 512-bit VNNI). A is 16 activation
// rows: their int8 values straight from the quantised rows (a strided tile load, no copy). B is one group of
// one weight panel: the 16 rows of matmul_packed.h's panels already sit in its "VNNI" layout (row j of B holds
// elements 4j..4j+3 of each of the 16 weight rows, one dword per row), so a panel is decoded once per call and
// token block into signed int8 (the unsigned bytes minus the type's offset) with its group scales and minimums
// beside. One tile product per group of G elements (32, or 16 for q2_k, q3_k, q6_k) gives exactly the integer sums
// the vector kernels compute for that group, and C's rows are the panel's rows in the lanes of one vector per
// activation row: the f32 steps after it are micro()'s, instruction for instruction (acc = fma(float(isum),
// s_g * xd, acc), then acc -= mn_g * xs for the types with a minimum). So every output has the same bits as on
// the vector paths of this build, at every batch size (CpuMatMul.EachRowHasTheSameBitsInEveryBatchSize runs the
// amx variant too), and decode (1-2 rows) keeps its bandwidth-bound vector kernels.
//
// Per group the tile unit does 16 x 16 x G multiply-adds in one instruction while the vector unit converts and
// scales an earlier group's 16 x 16 sums (three vector instructions per 16 outputs). 32-element groups keep up to
// three products in flight (C tiles 4-7 in turn, A and B alternating in 0/2 and 1/3): 6-7% faster than two on
// q4_k and q4_0 (`tessera bench matmul --rows 512 --k 2048 --m 768`, alternating, 2026-12-04); 16-element
// groups keep two (tiles 0/2/4 and 1/3/5; three measured no faster). The per-group store of C (1 KiB) and the f32
// steps bound it, not the multiplies: 512 x 768 x 2048 at 300-400 G multiply-adds/s on one thread here, about a
// tenth of the tile unit's peak and 6x the avx512 kernels; a batched C (every group stored, then scaled) lost.
//
// q8_0 does not come here (matmul_quant.cc: llama.cpp parity).
#pragma once

#include "ops/cpu/kernels.h"

#if defined(TS_AMX_TILES) && defined(__AVX512VNNI__)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "ops/cpu/amx_tiles.h"
#include "ops/cpu/matmul_packed.h"
#include "ops/cpu/matmul_repacked.h"

namespace tessera::ops::cpu::TS_CPU_ISA::packed {

using tiles::tile_dp_int8;
using tiles::tile_load;
using tiles::tile_store;
using tiles::tile_zero;

constexpr int kTileM = 16;  // activation rows per A tile (and rows of C)
// From this many activation rows the tiles run (below: the vector kernels, with the same bits). Measured on
// 2048 x 768 matrices, one thread (Xeon with AMX, 2026-12-03): vector / tiles ms at 8 rows 0.067 / 0.094 (q4_0),
// 0.090 / 0.103 (q4_k); at 12 rows 0.104 / 0.098, 0.148 / 0.108; at 16 rows 0.138 / 0.098, 0.187 / 0.119; at
// 32 rows 0.268 / 0.158, 0.399 / 0.194. Below 12 the tiles' fixed cost (each panel decoded to int8 per call)
// is not repaid.
constexpr int64_t kTileMinRows = 12;

// Tile registers 0/1: A (16 rows x G bytes), 2/3: B (G / 4 rows x 64 bytes), 4-7: C (16 x 16 int32).
template <int G>
inline tiles::TileConfig int8_tiles() {
  tiles::TileConfig c;
  for (int t = 0; t < 2; ++t) {
    c.set(t, kTileM, G);
    c.set(2 + t, G / 4, 64);
  }
  for (int t = 4; t < 8; ++t) c.set(t, kTileM, 64);
  return c;
}

// Group g's tile product: A and B in tiles g % 2 (and 2 + g % 2), C in tile 4 + g % 4.
template <int kSlot>
inline void issue_group(const int8_t* xa, int64_t k, const int8_t* bq) {
  tile_load<kSlot % 2>(xa, k);
  tile_load<2 + kSlot % 2>(bq, kV);
  tile_zero<4 + kSlot>();
  tile_dp_int8<4 + kSlot, kSlot % 2, 2 + kSlot % 2>();
}

// One weight panel for the tiles: kP rows as signed int8 in the B layout ((k / 4) rows of 64 bytes), and per group
// a vector of kP scales (and minimums).
struct TilePanel {
  AVec<int8_t> q;
  AVec<float> s, mn;
};

// Bytes u - off, for every byte of a panel's vectors.
inline VI signed_bytes(VI u, int off) { return _mm512_sub_epi8(u, _mm512_set1_epi8(static_cast<char>(off))); }

// Fills `p` from panel `pw` of a repacked matrix (nb blocks): the bytes and scales block_step() reads.
template <typename L>
void tile_panel_repacked(const uint8_t* pw, int64_t nb, TilePanel& p) {
  constexpr int kD = L::kGroup / 4;
  const int64_t groups = nb * L::kGroups;
  p.q.resize(static_cast<size_t>(groups * kD * kV));
  p.s.resize(static_cast<size_t>(groups * kP));
  if (L::kMin) p.mn.resize(static_cast<size_t>(groups * kP));
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* pb = pw + b * kP * L::kBytes;
    const int64_t g0 = b * L::kGroups;
    L::scales(pb, p.s.data() + g0 * kP, L::kMin ? p.mn.data() + g0 * kP : nullptr);
    for (int gl = 0; gl < L::kGroups; ++gl) {
      VI u[kD];
      L::group(pb, gl, u);
      int8_t* dst = p.q.data() + (g0 + gl) * kD * kV;
      for (int d = 0; d < kD; ++d) _mm512_store_si512(dst + d * kV, signed_bytes(u[d], L::kOffset));
    }
  }
}

// Fills `p` from rows i0 .. i0 + rows - 1 of a row-major matrix, through pack() (the vector tiles' decoder).
template <typename Dec>
void tile_panel_rows(const typename Dec::Block* w, int64_t nb, int64_t k, int rows, TilePanel& p) {
  thread_local Panel panel;
  pack<Dec>(w, nb, k, rows, panel);
  p.q.resize(panel.q.size());
  for (size_t i = 0; i < panel.q.size(); i += kV)
    _mm512_store_si512(p.q.data() + i, signed_bytes(_mm512_load_si512(panel.q.data() + i), Dec::kOffset));
  p.s.assign(panel.s.begin(), panel.s.end());
  if (Dec::kMin) p.mn.assign(panel.mn.begin(), panel.mn.end());
}

// The activation scales (and xd * sum(x) for the types with a minimum) of the padded activation rows, regrouped per
// tile of kTileM rows and group: [tile][group][kTileM], so that the 16 broadcasts of a group are at fixed offsets
// from one pointer (indexed [row][group] the compiler kept 16 pointers and ran out of registers).
struct TileScales {
  AVec<float> xd, xs;
};
inline void tile_scales(const Acts& a, int64_t n, int64_t groups, bool with_min, TileScales& ts) {
  const int64_t tiles = (n + kTileM - 1) / kTileM;
  ts.xd.assign(static_cast<size_t>(tiles * groups * kTileM), 0.0f);
  ts.xs.assign(with_min ? static_cast<size_t>(tiles * groups * kTileM) : 0, 0.0f);
  for (int64_t t = 0; t < n; ++t) {
    float* xd = ts.xd.data() + (t / kTileM) * groups * kTileM + t % kTileM;
    for (int64_t g = 0; g < groups; ++g) xd[g * kTileM] = a.xd[static_cast<size_t>(t * groups + g)];
    if (with_min) {
      float* xs = ts.xs.data() + (t / kTileM) * groups * kTileM + t % kTileM;
      for (int64_t g = 0; g < groups; ++g) xs[g * kTileM] = a.xs[static_cast<size_t>(t * groups + g)];
    }
  }
}

// One group's 16 x 16 sums (c: kTileM rows of kP int32, row t = activation row t) into the accumulators: micro()'s
// f32 steps. sv / mv: the group's weight scales and minimums; xd / xs: its kTileM activation scales and sums.
template <bool kMin>
inline __attribute__((always_inline)) void finish_group(VF* acc, const int32_t* c, const float* sv_ptr,
                                                        const float* mv_ptr, const float* xd, const float* xs) {
  const VF sv = load_vf(sv_ptr);
#pragma GCC unroll 16
  for (int t = 0; t < kTileM; ++t) acc[t] = fma_i(load_vi(c + t * kP), vmul(sv, bcastf(xd[t])), acc[t]);
  if constexpr (kMin) {
    const VF mv = load_vf(mv_ptr);
#pragma GCC unroll 16
    for (int t = 0; t < kTileM; ++t) acc[t] = fnma(mv, bcastf(xs[t]), acc[t]);
  }
}

// out[t * ld + r] for the panel's rows r < rows and activation rows t0 .. t1 - 1 (t0 a multiple of kTileM; the
// activations padded to whole tiles: pad_for_tiles). G: elements per group.
template <int G, bool kMin>
void tiles_panel(const TilePanel& p, int64_t k, const Acts& a, const TileScales& ts, int64_t t0, int64_t t1, float* out,
                 int64_t ld, int rows, const float* bias) {
  constexpr int kD = G / 4;
  const int64_t groups = k / G;
  const int8_t* bq = p.q.data();
  const float* s = p.s.data();
  const float* mn = kMin ? p.mn.data() : nullptr;
  alignas(64) int32_t c0[kTileM * kP], c1[kTileM * kP];
  for (int64_t tb = t0; tb < t1; tb += kTileM) {
    const int tt = static_cast<int>(std::min<int64_t>(kTileM, t1 - tb));
    const int8_t* xa = a.q.data() + tb * k;
    const float* xd = ts.xd.data() + tb * groups;  // tb / kTileM * groups * kTileM
    const float* xs = kMin ? ts.xs.data() + tb * groups : nullptr;
    VF acc[kTileM];
#pragma GCC unroll 16
    for (auto& v : acc) v = fzero();
    if constexpr (G >= 32) {
      // Up to three groups' tile products in flight (C tiles 4-7 in turn) while the vector unit finishes the oldest:
      // its C stored and scaled into the accumulators three groups after its product was issued.
      auto issue = [&](int64_t g) {
        const int8_t* xg = xa + g * G;
        const int8_t* bg = bq + g * kD * kV;
        switch (g & 3) {
          case 0:
            issue_group<0>(xg, k, bg);
            break;
          case 1:
            issue_group<1>(xg, k, bg);
            break;
          case 2:
            issue_group<2>(xg, k, bg);
            break;
          default:
            issue_group<3>(xg, k, bg);
            break;
        }
      };
      for (int64_t g = 0; g < std::min<int64_t>(3, groups); ++g) issue(g);
      for (int64_t g = 0; g < groups; ++g) {
        if (g + 3 < groups) issue(g + 3);
        switch (g & 3) {
          case 0:
            tile_store<4>(c0);
            break;
          case 1:
            tile_store<5>(c0);
            break;
          case 2:
            tile_store<6>(c0);
            break;
          default:
            tile_store<7>(c0);
            break;
        }
        finish_group<kMin>(acc, c0, s + g * kP, kMin ? mn + g * kP : nullptr, xd + g * kTileM,
                           kMin ? xs + g * kTileM : nullptr);
      }
    } else {
      // 16-element groups (q2_k, q3_k, q6_k): two in flight (three measured slower: each product is half as long).
      // Group g's tile product into C tile 4 (even groups) or 5 (odd ones), while the other is being finished.
      tile_load<0>(xa, k);
      tile_load<2>(bq, kV);
      tile_zero<4>();
      tile_dp_int8<4, 0, 2>();
      for (int64_t g = 0; g < groups; g += 2) {
        if (g + 1 < groups) {
          tile_load<1>(xa + (g + 1) * G, k);
          tile_load<3>(bq + (g + 1) * kD * kV, kV);
          tile_zero<5>();
          tile_dp_int8<5, 1, 3>();
        }
        tile_store<4>(c0);
        finish_group<kMin>(acc, c0, s + g * kP, kMin ? mn + g * kP : nullptr, xd + g * kTileM,
                           kMin ? xs + g * kTileM : nullptr);
        if (g + 2 < groups) {
          tile_load<0>(xa + (g + 2) * G, k);
          tile_load<2>(bq + (g + 2) * kD * kV, kV);
          tile_zero<4>();
          tile_dp_int8<4, 0, 2>();
        }
        if (g + 1 < groups) {
          tile_store<5>(c1);
          finish_group<kMin>(acc, c1, s + (g + 1) * kP, kMin ? mn + (g + 1) * kP : nullptr, xd + (g + 1) * kTileM,
                             kMin ? xs + (g + 1) * kTileM : nullptr);
        }
      }
    }
    // Constant indices only (an acc[t] with t < tt at run time would keep the array in memory throughout).
    const VF bv = bias ? load_rows(bias, rows) : fzero();
#pragma GCC unroll 16
    for (int t = 0; t < kTileM; ++t) {
      if (t < tt) store_rows(out + (tb + t) * ld, bias ? vadd(acc[t], bv) : acc[t], rows);
    }
  }
}

// The activation arrays the tiles read, padded with zeros to whole tiles of rows (the padding rows' outputs are
// computed and dropped).
inline void pad_for_tiles(Acts& a, int64_t n, int64_t k) {
  const int64_t padded = (n + kTileM - 1) / kTileM * kTileM;
  a.q.resize(static_cast<size_t>(padded * k));
}

// Token rows per pass over the panels: their int8 activations (up to 512 x k bytes) stay in L2 while every panel is
// decoded once per pass (a prefill chunk of 512 rows in one pass).
constexpr int64_t kTileTokenBlock = 512;

// A matrix's panels against the activation rows in token blocks, spread over the stream's threads: panel_of(pi, p)
// fills the tile panel of panel pi and returns its row count.
template <int G, bool kMin, typename PanelOf>
void tiles_matmul(int64_t n, int64_t k, int64_t m, int64_t panels, const Acts& a, float* out, const float* bias,
                  const Ctx& ctx, PanelOf&& panel_of) {
  thread_local TileScales tls_scales;
  TileScales& ts = tls_scales;
  tile_scales(a, n, k / G, kMin, ts);
  for (int64_t r0 = 0; r0 < n; r0 += kTileTokenBlock) {
    const int64_t r1 = std::min(n, r0 + kTileTokenBlock);
    parallel_for(ctx, panels, [&](int64_t pi) {
      thread_local TilePanel tp;
      const int rows = panel_of(pi, tp);
      tiles::tile_sources_ready();  // the panel (and the caller's activations) written before the tiles read them
      const tiles::TileScope scope(int8_tiles<G>());
      tiles_panel<G, kMin>(tp, k, a, ts, r0, r1, out + pi * kP, m, rows, bias ? bias + pi * kP : nullptr);
    });
  }
}

// out [n, m] = x [n, k] . w^T (+ bias) for a matrix repacked with layout `lay` (checked by the caller), on tiles.
template <typename L, typename Dec>
void matmul_repacked_tiles(const MatMulOp& op, const Ctx& ctx) {
  const int64_t n = op.x.dim(0), k = op.x.dim(1), m = op.w.dim(0);
  const int64_t nb = k / Dec::kBlockElems, whole = m / kP, tail_rows = m - whole * kP;
  const auto* base = data<const uint8_t>(op.w);
  thread_local Acts tls_acts;
  Acts& acts = tls_acts;
  quantize_acts(data<const float>(op.x), n, k, Dec::kGroup, Dec::kOffset, Dec::kMin, Dec::kBlockElems == 32, acts, ctx,
                Dec::kBlockElems == 256);
  pad_for_tiles(acts, n, k);
  const auto* tail = reinterpret_cast<const typename Dec::Block*>(base + whole * kP * nb * L::kBytes);
  tiles_matmul<Dec::kGroup, Dec::kMin>(n, k, m, whole + (tail_rows > 0 ? 1 : 0), acts, data<float>(op.out),
                                       op.bias.valid() ? data<const float>(op.bias) : nullptr, ctx,
                                       [&](int64_t pi, TilePanel& tp) {
                                         if (pi < whole) {
                                           tile_panel_repacked<L>(base + pi * kP * nb * L::kBytes, nb, tp);
                                           return kP;
                                         }
                                         tile_panel_rows<Dec>(tail, nb, k, static_cast<int>(tail_rows), tp);
                                         return static_cast<int>(tail_rows);
                                       });
}

// The same for a row-major matrix of Dec's blocks.
template <typename Dec>
void matmul_tiles(const MatMulOp& op, const Ctx& ctx) {
  const int64_t n = op.x.dim(0), k = op.x.dim(1), m = op.w.dim(0), nb = k / Dec::kBlockElems;
  const auto* w = data<const typename Dec::Block>(op.w);
  thread_local Acts tls_acts;
  Acts& acts = tls_acts;
  quantize_acts(data<const float>(op.x), n, k, Dec::kGroup, Dec::kOffset, Dec::kMin, Dec::kBlockElems == 32, acts, ctx,
                Dec::kBlockElems == 256);
  pad_for_tiles(acts, n, k);
  tiles_matmul<Dec::kGroup, Dec::kMin>(n, k, m, (m + kP - 1) / kP, acts, data<float>(op.out),
                                       op.bias.valid() ? data<const float>(op.bias) : nullptr, ctx,
                                       [&](int64_t pi, TilePanel& tp) {
                                         const int rows = static_cast<int>(std::min<int64_t>(kP, m - pi * kP));
                                         tile_panel_rows<Dec>(w + pi * kP * nb, nb, k, rows, tp);
                                         return rows;
                                       });
}

// Every batch size of a row-major matrix in the amx build: the tiles from kTileMinRows rows, matmul_packed.h's
// vector kernels below (the same bits).
template <typename Dec>
Status tiles_or_vectors(const MatMulOp& op, const Ctx& ctx) {
  if (op.x.dim(0) >= kTileMinRows) {
    matmul_tiles<Dec>(op, ctx);
  } else {
    matmul<Dec>(op, ctx);
  }
  return ok_status();
}

// A repacked matrix likewise (matmul_repacked.h below kTileMinRows rows).
template <typename L, typename Dec>
Status repacked_tiles_or_vectors(const MatMulOp& op, const PanelLayout& lay, const Ctx& ctx) {
  if (op.x.dim(0) < kTileMinRows) return matmul_repacked<L, Dec>(op, lay, ctx);
  TS_RETURN_IF_ERROR(check_layout(op, lay));
  matmul_repacked_tiles<L, Dec>(op, ctx);
  return ok_status();
}

}  // namespace tessera::ops::cpu::TS_CPU_ISA::packed
#endif  // TS_AMX_TILES
