// A registered region as the agent and its endpoints see it, and the agent's table of them.
//
// Host regions expose `data`; agent-allocated host regions also own the ShmSegment their bytes live in.
// Device regions have no `data` and are reached through DeviceMemory. Everyone holding a Region keeps its
// memory alive (shared_ptr), so an unregister while a transfer is in flight cannot free bytes under it.
//
// Thread-safety: Region is immutable after creation; RegionTable is internally locked.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "base/status.h"
#include "link/device_memory.h"
#include "link/internal/shm_segment.h"
#include "link/link.h"

namespace tessera::link::internal {

struct Region {
  RegionId id{};
  MemoryKind kind = MemoryKind::kHost;
  std::byte* data = nullptr;  // host bytes; null for device regions
  uint64_t length = 0;
  std::unique_ptr<ShmSegment> segment;   // set for agent-allocated (shareable) regions
  std::shared_ptr<DeviceMemory> device;  // set for device regions

  std::string shm_name() const { return segment ? segment->name() : std::string(); }
  // Copies between the region and host memory, staging through DeviceMemory for device regions.
  Status copy_out(uint64_t offset, void* dst, uint64_t len) const;
  Status copy_in(uint64_t offset, const void* src, uint64_t len) const;
};

// OK when [offset, offset + len) lies inside a region of `region_length` bytes (overflow-safe).
Status check_range(uint64_t region_length, uint64_t offset, uint64_t len, RegionId id, const char* side);

class RegionTable {
 public:
  RegionId add(std::shared_ptr<Region> region);  // assigns the id
  std::shared_ptr<Region> remove(RegionId id);   // null if unknown
  std::shared_ptr<Region> find(RegionId id) const;
  size_t size() const;

 private:
  mutable std::mutex mu_;
  uint64_t next_id_ = 1;                                           // guarded by mu_
  std::unordered_map<uint64_t, std::shared_ptr<Region>> regions_;  // guarded by mu_
};

}  // namespace tessera::link::internal
