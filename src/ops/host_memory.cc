#include "ops/host_memory.h"

#include <cstdlib>
#include <cstring>

#include <fmt/core.h>

namespace tessera::ops {
namespace {

constexpr size_t kAlignment = 64;

class HostBuffer final : public Buffer {
 public:
  HostBuffer(void* p, size_t size) : Buffer(size), p_(p) {}
  ~HostBuffer() override { std::free(p_); }
  void* host_ptr() override { return p_; }

 private:
  void* p_;
};

}  // namespace

Result<std::unique_ptr<Buffer>> alloc_host_buffer(size_t bytes, std::string_view backend) {
  const size_t rounded = std::max(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (p == nullptr)
    return resource_exhausted(fmt::format("{}: cannot allocate {} bytes of host memory", backend, bytes));
  std::memset(p, 0, rounded);
  return std::unique_ptr<Buffer>(new HostBuffer(p, bytes));
}

Status check_host_range(const Buffer& b, size_t offset, size_t bytes, const char* what) {
  if (offset > b.size() || bytes > b.size() - offset) {
    return out_of_range(
        fmt::format("{} of {} bytes at offset {} runs past a {}-byte buffer", what, bytes, offset, b.size()));
  }
  return ok_status();
}

}  // namespace tessera::ops
