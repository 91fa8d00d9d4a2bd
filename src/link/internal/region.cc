#include "link/internal/region.h"

#include <cstring>

#include <fmt/format.h>

namespace tessera::link::internal {

Status Region::copy_out(uint64_t offset, void* dst, uint64_t len) const {
  if (len == 0) return ok_status();
  if (device) return device->copy_to_host(offset, dst, len);
  std::memcpy(dst, data + offset, len);
  return ok_status();
}

Status Region::copy_in(uint64_t offset, const void* src, uint64_t len) const {
  if (len == 0) return ok_status();
  if (device) return device->copy_from_host(offset, src, len);
  std::memcpy(data + offset, src, len);
  return ok_status();
}

Status check_range(uint64_t region_length, uint64_t offset, uint64_t len, RegionId id, const char* side) {
  if (offset > region_length || len > region_length - offset) {
    return out_of_range(fmt::format("{} region {}: range [{}, {}+{}) is outside its {} bytes", side, to_u64(id), offset,
                                    offset, len, region_length));
  }
  return ok_status();
}

RegionId RegionTable::add(std::shared_ptr<Region> region) {
  std::lock_guard<std::mutex> lock(mu_);
  RegionId id{next_id_++};
  region->id = id;
  regions_.emplace(to_u64(id), std::move(region));
  return id;
}

std::shared_ptr<Region> RegionTable::remove(RegionId id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = regions_.find(to_u64(id));
  if (it == regions_.end()) return nullptr;
  auto r = std::move(it->second);
  regions_.erase(it);
  return r;
}

std::shared_ptr<Region> RegionTable::find(RegionId id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = regions_.find(to_u64(id));
  return it == regions_.end() ? nullptr : it->second;
}

size_t RegionTable::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return regions_.size();
}

}  // namespace tessera::link::internal
