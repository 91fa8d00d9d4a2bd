// Widening stored weights to f32, four elements at a time, for every DType a matmul weight or an embedding
// table may have. The includer defines W_WORD(i) (word i of the weight binding) and the specialisation
// constant WTYPE (the DType's enumerator value), so each pipeline holds one type's decoder only.
//
// dq4(rb, e, k) returns elements e .. e + 3 (e a multiple of 4) of the row starting at byte rb of a row of
// k elements. In every block type four such elements share their scales and sit in four consecutive bytes
// (or nibbles / crumbs of them), so one (possibly unaligned) 32-bit read brings their quantised bits. The
// arithmetic is base/quant's, operation for operation (`precise` forbids fused multiply-adds), so a decoded
// element is bit-identical to the reference's. Dense rows may end inside a group of four: elements at or
// past k read as 0 (the caller multiplies them by 0 activations).

const uint T_F32 = 0u, T_F16 = 1u, T_BF16 = 2u, T_Q8_0 = 3u, T_Q4_0 = 4u, T_Q4_1 = 6u, T_Q5_0 = 7u,
           T_Q5_1 = 8u, T_Q2_K = 9u, T_Q3_K = 10u, T_Q4_K = 11u, T_Q5_K = 12u, T_Q6_K = 13u,
           T_MXFP4 = 14u;

uint w_byte(uint a) { return (W_WORD(a >> 2) >> ((a & 3u) * 8u)) & 0xffu; }
uint w_u16(uint a) { return (W_WORD(a >> 2) >> ((a & 2u) * 8u)) & 0xffffu; }  // a is even
uint w_u32(uint a) {
  const uint s = (a & 3u) * 8u;
  const uint lo = W_WORD(a >> 2);
  if (s == 0u) return lo;
  return (lo >> s) | (W_WORD((a >> 2) + 1u) << (32u - s));
}
// Byte c (0..3) of a word, optionally shifted right within it.
uint byte_of(uint w, uint c) { return (w >> (8u * c)) & 0xffu; }
int sbyte_of(uint w, uint c) { return bitfieldExtract(int(w), int(8u * c), 8); }

vec4 dq4(uint rb, uint e, uint k) {
  vec4 v = vec4(0.0);
  if (WTYPE == T_F32) {
    for (uint c = 0u; c < 4u; ++c)
      if (e + c < k) v[c] = uintBitsToFloat(W_WORD((rb >> 2) + e + c));
  } else if (WTYPE == T_F16) {
    for (uint c = 0u; c < 4u; ++c)
      if (e + c < k) v[c] = h2f(w_u16(rb + 2u * (e + c)));
  } else if (WTYPE == T_BF16) {
    for (uint c = 0u; c < 4u; ++c)
      if (e + c < k) v[c] = bf2f(w_u16(rb + 2u * (e + c)));
  } else if (WTYPE == T_Q8_0) {
    const uint blk = rb + (e >> 5) * 34u;
    const float d = h2f(w_u16(blk));
    const uint q = w_u32(blk + 2u + (e & 31u));
    for (uint c = 0u; c < 4u; ++c) {
      precise float x = d * float(sbyte_of(q, c));
      v[c] = x;
    }
  } else if (WTYPE == T_Q4_0 || WTYPE == T_Q4_1) {
    const bool one = WTYPE == T_Q4_1;
    const uint blk = rb + (e >> 5) * (one ? 20u : 18u);
    const float d = h2f(w_u16(blk));
    const float m = one ? h2f(w_u16(blk + 2u)) : 0.0;
    const uint j = e & 31u;
    const uint q = w_u32(blk + (one ? 4u : 2u) + (j & 15u));
    const uint shift = j < 16u ? 0u : 4u;
    for (uint c = 0u; c < 4u; ++c) {
      const uint nib = (byte_of(q, c) >> shift) & 15u;
      if (one) {
        precise float x = float(nib) * d + m;
        v[c] = x;
      } else {
        precise float x = d * float(int(nib) - 8);
        v[c] = x;
      }
    }
  } else if (WTYPE == T_Q5_0 || WTYPE == T_Q5_1) {
    const bool one = WTYPE == T_Q5_1;
    const uint blk = rb + (e >> 5) * (one ? 24u : 22u);
    const float d = h2f(w_u16(blk));
    const float m = one ? h2f(w_u16(blk + 2u)) : 0.0;
    const uint h = w_u32(blk + (one ? 4u : 2u));
    const uint j = e & 31u;
    const uint q = w_u32(blk + (one ? 8u : 6u) + (j & 15u));
    const uint shift = j < 16u ? 0u : 4u;
    for (uint c = 0u; c < 4u; ++c) {
      const uint qv = ((byte_of(q, c) >> shift) & 15u) | (((h >> (j + c)) & 1u) << 4);
      if (one) {
        precise float x = float(qv) * d + m;
        v[c] = x;
      } else {
        precise float x = float(int(qv) - 16) * d;
        v[c] = x;
      }
    }
  } else if (WTYPE == T_Q2_K) {
    const uint blk = rb + (e >> 8) * 84u, E = e & 255u;
    const uint s = w_byte(blk + E / 16u);
    const float d = h2f(w_u16(blk + 80u)), dmin = h2f(w_u16(blk + 82u));
    const uint q = w_u32(blk + 16u + 32u * (E / 128u) + (E & 31u));
    const uint shift = 2u * ((E & 127u) / 32u);
    for (uint c = 0u; c < 4u; ++c) {
      precise float x = d * float(s & 15u) * float((byte_of(q, c) >> shift) & 3u) - dmin * float(s >> 4);
      v[c] = x;
    }
  } else if (WTYPE == T_Q3_K) {
    const uint blk = rb + (e >> 8) * 110u, E = e & 255u;
    const uint i = E / 16u;
    const uint low = i < 8u ? (w_byte(blk + 96u + i) & 15u) : (w_byte(blk + 88u + i) >> 4);
    const uint sc = low | (((w_byte(blk + 104u + (i & 3u)) >> (2u * (i / 4u))) & 3u) << 4);
    const float d = h2f(w_u16(blk + 108u));
    const uint q = w_u32(blk + 32u + 32u * (E / 128u) + (E & 31u));
    const uint shift = 2u * ((E & 127u) / 32u);
    const uint hm = w_u32(blk + (E & 31u));
    for (uint c = 0u; c < 4u; ++c) {
      const int crumb = int((byte_of(q, c) >> shift) & 3u);
      const int qv = crumb - (((byte_of(hm, c) >> (E / 32u)) & 1u) != 0u ? 0 : 4);
      precise float x = d * float(int(sc) - 32) * float(qv);
      v[c] = x;
    }
  } else if (WTYPE == T_Q4_K || WTYPE == T_Q5_K) {
    const bool five = WTYPE == T_Q5_K;
    const uint blk = rb + (e >> 8) * (five ? 176u : 144u), E = e & 255u;
    const uint j = E / 32u;
    uint sc, mn;
    if (j < 4u) {
      sc = w_byte(blk + 4u + j) & 63u;
      mn = w_byte(blk + 8u + j) & 63u;
    } else {
      sc = (w_byte(blk + 8u + j) & 15u) | ((w_byte(blk + j) >> 6) << 4);
      mn = (w_byte(blk + 8u + j) >> 4) | ((w_byte(blk + 4u + j) >> 6) << 4);
    }
    const float d = h2f(w_u16(blk)), dmin = h2f(w_u16(blk + 2u));
    precise float ds = d * float(sc);
    precise float dm = dmin * float(mn);
    const uint q = w_u32(blk + (five ? 48u : 16u) + 32u * (E / 64u) + (E & 31u));
    const uint shift = (E & 63u) < 32u ? 0u : 4u;
    const uint qh = five ? w_u32(blk + 16u + (E & 31u)) : 0u;
    for (uint c = 0u; c < 4u; ++c) {
      const uint qv = ((byte_of(q, c) >> shift) & 15u) + (five ? ((byte_of(qh, c) >> j) & 1u) << 4 : 0u);
      precise float x = ds * float(qv) - dm;
      v[c] = x;
    }
  } else if (WTYPE == T_MXFP4) {
    // An E8M0 exponent byte, then E2M1 codes (doubled, as ggml keeps them) in q4_0's nibble order.
    const uint blk = rb + (e >> 5) * 17u;
    const uint x = w_byte(blk);
    const float d = uintBitsToFloat(x < 2u ? (0x00200000u << x) : ((x - 1u) << 23));
    const uint j = e & 31u;
    const uint q = w_u32(blk + 1u + (j & 15u));
    const uint shift = j < 16u ? 0u : 4u;
    for (uint c = 0u; c < 4u; ++c) {
      const uint code = (byte_of(q, c) >> shift) & 15u;
      const int mag = int(code & 7u) < 4 ? int(code & 7u) : int(code & 7u) == 4 ? 4 : int(code & 7u) == 5 ? 6
                    : int(code & 7u) == 6 ? 8 : 12;
      precise float y = float(code < 8u ? mag : -mag) * d;
      v[c] = y;
    }
  } else if (WTYPE == T_Q6_K) {
    const uint blk = rb + (e >> 8) * 210u, E = e & 255u;
    const uint h = E / 128u, g = (E & 127u) / 32u, l = E & 31u;
    const uint lo = w_u32(blk + 64u * h + 32u * (g & 1u) + l);
    const uint hi = w_u32(blk + 128u + 32u * h + l);
    const int sc = bitfieldExtract(int(w_byte(blk + 192u + E / 16u)), 0, 8);
    const float d = h2f(w_u16(blk + 208u));
    for (uint c = 0u; c < 4u; ++c) {
      const uint lb = byte_of(lo, c);
      const uint qv = ((g >= 2u ? lb >> 4 : lb) & 15u) | (((byte_of(hi, c) >> (2u * g)) & 3u) << 4);
      precise float x = d * float(sc) * float(int(qv) - 32);
      v[c] = x;
    }
  }
  return v;
}
