// FlatMap64: an open-addressing hash map from 64-bit keys to 32-bit values, for the recognizer's hot tables
// (hash-consed stack nodes, cached transitions). Linear probing, power-of-two capacity, grows at half full.
// The key ~0 is reserved (never a real key here).
//
// Thread-safety: none; one owner.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tessera::grammar {

inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

class FlatMap64 {
 public:
  static constexpr uint64_t kEmpty = ~uint64_t{0};

  explicit FlatMap64(size_t capacity = 256) { reset(capacity); }

  const uint32_t* find(uint64_t key) const {
    for (size_t i = mix64(key) & mask_;; i = (i + 1) & mask_) {
      if (keys_[i] == key) return &vals_[i];
      if (keys_[i] == kEmpty) return nullptr;
    }
  }
  // `key` must not be present.
  void insert(uint64_t key, uint32_t value) {
    if ((size_ + 1) * 2 > keys_.size()) grow();
    place(key, value);
    ++size_;
  }
  size_t size() const { return size_; }
  size_t bytes() const { return keys_.size() * (sizeof(uint64_t) + sizeof(uint32_t)); }
  void clear() { reset(256); }

 private:
  void reset(size_t capacity) {
    size_t c = 16;
    while (c < capacity) c <<= 1;
    keys_.assign(c, kEmpty);
    vals_.assign(c, 0);
    mask_ = c - 1;
    size_ = 0;
  }
  void place(uint64_t key, uint32_t value) {
    size_t i = mix64(key) & mask_;
    while (keys_[i] != kEmpty) i = (i + 1) & mask_;
    keys_[i] = key;
    vals_[i] = value;
  }
  void grow() {
    std::vector<uint64_t> keys = std::move(keys_);
    std::vector<uint32_t> vals = std::move(vals_);
    keys_.assign(keys.size() * 2, kEmpty);
    vals_.assign(keys.size() * 2, 0);
    mask_ = keys_.size() - 1;
    for (size_t i = 0; i < keys.size(); ++i)
      if (keys[i] != kEmpty) place(keys[i], vals[i]);
  }

  std::vector<uint64_t> keys_;
  std::vector<uint32_t> vals_;
  size_t mask_ = 0, size_ = 0;
};

}  // namespace tessera::grammar
