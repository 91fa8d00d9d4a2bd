// AttentionPrefillOp and AttentionDecodeOp over a paged cache of f32, f16, bf16, q8_0 or q4_0 (p.ctype; each
// element widened as base/quant widens it, the block types read a head's row of blocks), one workgroup per
// (query, head). Query i sits at position start_pos + i (prefill: one block table) or lens[i] - 1 (decode:
// row i of the tables). The reference's steps, each spread over the workgroup: scores q.k (times scale or
// over sqrt(head_dim); soft-capped; only the last `window` positions when windowed) into the scratch row of
// this workgroup; their maximum; exponentials and their sum; normalised; then each invocation accumulates
// its output dimensions over the positions in order, as the reference does. A position or block number out
// of range sets the error word and the workgroup writes nothing. With sinks (gpt-oss), head h's sink is one more
// logit in the maximum and the sum that reads no value.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;

layout(set = 0, binding = 0) readonly buffer Q { float d[]; } q;
layout(set = 0, binding = 1) readonly buffer Kc { uint d[]; } kc;
layout(set = 0, binding = 2) readonly buffer Vc { uint d[]; } vc;
layout(set = 0, binding = 3) readonly buffer Tables { int d[]; } tables;
layout(set = 0, binding = 4) readonly buffer Lens { int d[]; } lens;
layout(set = 0, binding = 5) buffer Out { float d[]; } outb;
layout(set = 0, binding = 6) buffer Scores { float d[]; } scores;
layout(set = 0, binding = 7) buffer Err { uint d[]; } err;
layout(set = 0, binding = 8) readonly buffer Sinks { float d[]; } sinks;
layout(push_constant) uniform Push {
  uint q_off, kc_off, vc_off, tables_off, lens_off, out_off;  // kc_off, vc_off: elements, or bytes (q8_0, q4_0)
  uint table_stride, decode;
  int start_pos;
  uint max_ctx, n_heads, kv_heads, head_dim, block_tokens, num_blocks;
  float scale, softcap;
  int window;
  uint ctype, item_base, items;  // ctype: 0 f32, 1 f16, 2 bf16, 3 q8_0, 4 q4_0
  uint sinks_off, has_sinks;
} p;

#include "common.glsl"

const uint WG = 64u;
const uint MAX_HEAD_DIM = 512u;
shared float qs[MAX_HEAD_DIM];
shared float red[WG];
shared uint bad;

uint cache_word(uint which, uint i) { return which == 0u ? kc.d[i] : vc.d[i]; }
uint cache_byte(uint which, uint a) { return (cache_word(which, a >> 2) >> ((a & 3u) * 8u)) & 0xffu; }

// Element e of the cache (e = head row * head_dim + j) of K (which 0) or V (1).
float cache_at(uint which, uint e) {
  const uint off = which == 0u ? p.kc_off : p.vc_off;
  if (p.ctype == 0u) return uintBitsToFloat(cache_word(which, off + e));
  if (p.ctype <= 2u) {
    const uint i = off + e;
    const uint w = cache_word(which, i >> 1);
    const uint h = (i & 1u) != 0u ? w >> 16 : w & 0xffffu;
    return p.ctype == 1u ? h2f(h) : bf2f(h);
  }
  const uint bb = p.ctype == 3u ? 34u : 18u, j = e % p.head_dim;
  const uint blk = off + (e / p.head_dim) * (p.head_dim / 32u) * bb + (j >> 5) * bb;
  const float d = h2f(cache_byte(which, blk) | (cache_byte(which, blk + 1u) << 8));
  const uint jj = j & 31u;
  if (p.ctype == 3u) {
    precise float x = d * float(bitfieldExtract(int(cache_byte(which, blk + 2u + jj)), 0, 8));
    return x;
  }
  const uint b = cache_byte(which, blk + 2u + (jj & 15u));
  precise float x = d * float(int(jj < 16u ? b & 15u : b >> 4) - 8);
  return x;
}

void main() {
  const uint slot = linear_group();
  const uint item = p.item_base + slot;
  if (slot >= p.items) return;
  const uint t = gl_LocalInvocationID.x;
  const uint i = item / p.n_heads, h = item % p.n_heads;
  const int pos = p.decode != 0u ? lens.d[p.lens_off + i] - 1 : p.start_pos + int(i);
  const uint table = p.tables_off + (p.decode != 0u ? i * p.table_stride : 0u);
  if (t == 0u) bad = 0u;
  barrier();
  if (pos < 0 || uint(pos) >= p.max_ctx || uint(pos) / p.block_tokens + 1u > p.table_stride) {
    if (t == 0u) atomicOr(err.d[0], 1u);
    return;  // uniform across the workgroup
  }
  const uint need = uint(pos) / p.block_tokens + 1u;
  for (uint b = t; b < need; b += WG) {
    const int blk = tables.d[table + b];
    if (blk < 0 || uint(blk) >= p.num_blocks) bad = 1u;
  }
  const uint qo = p.q_off + (i * p.n_heads + h) * p.head_dim;
  for (uint d = t; d < p.head_dim; d += WG) qs[d] = q.d[qo + d];
  barrier();
  if (bad != 0u) {
    if (t == 0u) atomicOr(err.d[0], 1u);
    return;
  }
  const uint kvh = h / (p.n_heads / p.kv_heads);
  const uint first = p.window > 0 ? uint(max(0, pos - p.window + 1)) : 0u;
  const uint last = uint(pos);
  const uint srow = slot * p.max_ctx;
  const float denom = sqrt(float(p.head_dim));

  float mx = uintBitsToFloat(0xff800000u);  // -inf
  for (uint s = first + t; s <= last; s += WG) {
    const uint row = ((uint(tables.d[table + s / p.block_tokens]) * p.block_tokens + s % p.block_tokens) * p.kv_heads +
                      kvh) * p.head_dim;
    float acc = 0.0;
    for (uint d = 0u; d < p.head_dim; ++d) acc += qs[d] * cache_at(0u, row + d);
    precise float sc = p.scale > 0.0 ? acc * p.scale : acc / denom;
    if (p.softcap > 0.0) sc = p.softcap * tanh(sc / p.softcap);
    scores.d[srow + s] = sc;
    mx = sc > mx ? sc : mx;
  }
  red[t] = mx;
  barrier();
  for (uint s = WG / 2u; s > 0u; s >>= 1) {
    if (t < s) red[t] = red[t + s] > red[t] ? red[t + s] : red[t];
    barrier();
  }
  mx = red[0];
  barrier();
  // A sink (gpt-oss) is one more logit of this head: it joins the maximum and the sum and reads no value.
  const float sink = p.has_sinks != 0u ? sinks.d[p.sinks_off + h] : 0.0;
  if (p.has_sinks != 0u) mx = sink > mx ? sink : mx;
  float sum = 0.0;
  for (uint s = first + t; s <= last; s += WG) {
    const float e = exp(scores.d[srow + s] - mx);
    scores.d[srow + s] = e;
    sum += e;
  }
  red[t] = sum;
  barrier();
  for (uint s = WG / 2u; s > 0u; s >>= 1) {
    if (t < s) red[t] = red[t] + red[t + s];
    barrier();
  }
  sum = red[0];
  if (p.has_sinks != 0u) sum += exp(sink - mx);
  for (uint s = first + t; s <= last; s += WG) scores.d[srow + s] = scores.d[srow + s] / sum;
  memoryBarrierBuffer();
  barrier();
  const uint oo = p.out_off + (i * p.n_heads + h) * p.head_dim;
  for (uint d = t; d < p.head_dim; d += WG) {
    precise float acc = 0.0;
    for (uint s = first; s <= last; ++s) {
      const uint row = ((uint(tables.d[table + s / p.block_tokens]) * p.block_tokens + s % p.block_tokens) *
                            p.kv_heads + kvh) * p.head_dim;
      acc += scores.d[srow + s] * cache_at(1u, row + d);
    }
    outb.d[oo + d] = acc;
  }
}
