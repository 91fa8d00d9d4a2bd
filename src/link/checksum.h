// checksum64: the link's payload checksum. A Fletcher-style sum over 64-bit words in eight independent lanes
// (so it runs near memory speed), finished with a 64-bit mixer. It catches the corruptions a transport bug
// makes (lost, duplicated, reordered or overwritten words); it is not a cryptographic hash.
//
// Checksum64 computes the same value incrementally, so a payload can be summed piece by piece while it is
// still in cache from the socket copy (pieces of any length, in order).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera::link {

uint64_t checksum64(const void* data, size_t length);

class Checksum64 {
 public:
  void update(const void* data, size_t length);
  uint64_t value() const;  // checksum64 of everything passed to update so far

 private:
  void blocks(const unsigned char* p, size_t count);  // whole 64-byte blocks

  uint64_t a_[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  uint64_t b_[8] = {};
  unsigned char carry_[64] = {};  // a partial block waiting for the next update
  size_t carry_len_ = 0;
  uint64_t length_ = 0;
};

}  // namespace tessera::link
