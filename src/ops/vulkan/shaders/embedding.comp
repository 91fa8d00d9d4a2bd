// EmbeddingOp: out[i] = widen(table[ids[i]]) * scale, four elements per invocation. An id outside the
// vocabulary sets the stream's error word and writes nothing. A table larger than one binding is looked up
// in slices of rows, one dispatch each: ids outside [id_base, id_base + id_count) are another's.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint WTYPE = 0u;

layout(set = 0, binding = 0) readonly buffer Table { uint d[]; } table;
layout(set = 0, binding = 1) readonly buffer Ids { int d[]; } ids;
layout(set = 0, binding = 2) writeonly buffer Out { float d[]; } outb;
layout(set = 0, binding = 3) buffer Err { uint d[]; } err;
layout(push_constant) uniform Push {
  uint table_off;  // bytes
  uint ids_off, out_off;
  uint dim, vocab, n, row_bytes;
  float scale;
  uint id_base, id_count, check;  // this dispatch's table rows; check: flag ids outside the vocabulary
} p;

#include "common.glsl"
#define W_WORD(i) table.d[i]
#include "dequant.glsl"

void main() {
  const uint groups = (p.dim + 3u) / 4u;
  const uint g = linear_group() * 64u + gl_LocalInvocationID.x;
  if (g >= p.n * groups) return;
  const uint i = g / groups, e = (g % groups) * 4u;
  const int id = ids.d[p.ids_off + i];
  if (id < 0 || uint(id) >= p.vocab) {
    if (p.check != 0u) atomicOr(err.d[0], 1u);
    return;
  }
  if (uint(id) < p.id_base || uint(id) - p.id_base >= p.id_count) return;
  const vec4 v = dq4(p.table_off + (uint(id) - p.id_base) * p.row_bytes, e, p.dim);
  for (uint c = 0u; c < 4u && e + c < p.dim; ++c) {
    precise float x = p.scale == 1.0 ? v[c] : v[c] * p.scale;
    outb.d[p.out_off + i * p.dim + e + c] = x;
  }
}
