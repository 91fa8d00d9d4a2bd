// A POSIX shared-memory segment holding one region's bytes, mappable by another process on the same host.
//
// Layout: one 4 KiB header page (magic, data length, a `valid` word the owner clears when the region is
// unregistered) followed by the data. The owner creates and finally unlinks the name; a peer opens and maps
// it, and checks `valid` before every copy so an unregistered region is rejected without being touched.
// Both map with MAP_POPULATE: page-table faults would otherwise cost more than the copies on first use.
//
// Thread-safety: immutable after creation except the atomic `valid` word.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"

namespace tessera::link::internal {

class ShmSegment {
 public:
  static constexpr uint64_t kHeaderBytes = 4096;

  // Creates "/<name>" with `length` data bytes (zeroed). The segment unlinks the name when destroyed.
  static Result<std::unique_ptr<ShmSegment>> create(const std::string& name, uint64_t length);
  // Maps an existing segment created by another process; checks that it holds at least `length` bytes.
  static Result<std::unique_ptr<ShmSegment>> open(const std::string& name, uint64_t length);
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  std::byte* data() const { return base_ + kHeaderBytes; }
  uint64_t length() const { return length_; }
  const std::string& name() const { return name_; }
  bool valid() const;
  void invalidate();

 private:
  ShmSegment(std::string name, std::byte* base, uint64_t length, bool owner)
      : name_(std::move(name)), base_(base), length_(length), owner_(owner) {}
  std::atomic<uint32_t>* valid_word() const;

  std::string name_;
  std::byte* base_;
  uint64_t length_;
  bool owner_;
};

// Unlinks "/tessera-<pid>-*" segments whose creating process no longer exists (killed agents cannot clean
// up after themselves). Returns how many were removed.
int remove_stale_segments();

}  // namespace tessera::link::internal
