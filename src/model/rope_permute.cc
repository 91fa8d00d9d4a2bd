#include "model/rope_permute.h"

#include <cstring>

#include "base/check.h"

namespace tessera::model {

std::vector<uint8_t> permute_rope_rows(const uint8_t* data, int64_t rows, size_t row_bytes, int n_heads,
                                       bool to_interleaved) {
  TS_CHECK(n_heads > 0 && rows % n_heads == 0 && (rows / n_heads) % 2 == 0);
  const int64_t head_dim = rows / n_heads, half = head_dim / 2;
  std::vector<uint8_t> out(static_cast<size_t>(rows) * row_bytes);
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t part = 0; part < 2; ++part) {
        int64_t half_row = h * head_dim + part * half + i;  // rotate-half position
        int64_t inter_row = h * head_dim + 2 * i + part;    // interleaved position
        int64_t src = to_interleaved ? half_row : inter_row;
        int64_t dst = to_interleaved ? inter_row : half_row;
        std::memcpy(out.data() + static_cast<size_t>(dst) * row_bytes, data + static_cast<size_t>(src) * row_bytes,
                    row_bytes);
      }
    }
  }
  return out;
}

}  // namespace tessera::model
