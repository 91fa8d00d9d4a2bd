#include "link/internal/shm_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

namespace tessera::link::internal {
namespace {

constexpr uint64_t kMagic = 0x5453484d53454731ull;  // "TSHMSEG1"

struct Header {
  uint64_t magic;
  uint64_t length;
  std::atomic<uint32_t> valid;
};
static_assert(sizeof(Header) <= ShmSegment::kHeaderBytes);

}  // namespace

Result<std::unique_ptr<ShmSegment>> ShmSegment::create(const std::string& name, uint64_t length) {
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return unavailable(fmt::format("shm_open({}) failed: {}", name, std::strerror(errno)));
  uint64_t total = kHeaderBytes + length;
  if (ftruncate(fd, static_cast<off_t>(total)) != 0) {
    int e = errno;
    close(fd);
    shm_unlink(name.c_str());
    return resource_exhausted(
        fmt::format("cannot size shared memory {} to {} bytes: {}", name, total, std::strerror(e)));
  }
  void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  int e = errno;
  close(fd);
  if (p == MAP_FAILED) {
    shm_unlink(name.c_str());
    return resource_exhausted(fmt::format("cannot map shared memory {} ({} bytes): {}", name, total, std::strerror(e)));
  }
  auto* h = new (p) Header;
  h->magic = kMagic;
  h->length = length;
  h->valid.store(1, std::memory_order_release);
  return std::unique_ptr<ShmSegment>(new ShmSegment(name, static_cast<std::byte*>(p), length, true));
}

Result<std::unique_ptr<ShmSegment>> ShmSegment::open(const std::string& name, uint64_t length) {
  int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) return not_found(fmt::format("cannot open peer shared memory {}: {}", name, std::strerror(errno)));
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < kHeaderBytes + length) {
    close(fd);
    return data_loss(fmt::format("peer shared memory {} is smaller than its described {} bytes", name, length));
  }
  uint64_t total = kHeaderBytes + length;
  void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  int e = errno;
  close(fd);
  if (p == MAP_FAILED) return unavailable(fmt::format("cannot map peer shared memory {}: {}", name, std::strerror(e)));
  auto* h = static_cast<Header*>(p);
  if (h->magic != kMagic || h->length != length) {
    munmap(p, total);
    return data_loss(
        fmt::format("peer shared memory {} has a bad header (not a Tessera region of {} bytes)", name, length));
  }
  return std::unique_ptr<ShmSegment>(new ShmSegment(name, static_cast<std::byte*>(p), length, false));
}

ShmSegment::~ShmSegment() {
  if (owner_) {
    invalidate();
    shm_unlink(name_.c_str());
  }
  munmap(base_, kHeaderBytes + length_);
}

std::atomic<uint32_t>* ShmSegment::valid_word() const { return &reinterpret_cast<Header*>(base_)->valid; }
bool ShmSegment::valid() const { return valid_word()->load(std::memory_order_acquire) != 0; }
void ShmSegment::invalidate() { valid_word()->store(0, std::memory_order_release); }

int remove_stale_segments() {
  DIR* dir = opendir("/dev/shm");
  if (!dir) return 0;
  int removed = 0;
  while (dirent* e = readdir(dir)) {
    unsigned long pid = 0;
    unsigned long serial = 0;
    if (std::sscanf(e->d_name, "tessera-%lu-%lu", &pid, &serial) != 2 || pid == 0) continue;
    if (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to judge)
    if (shm_unlink(fmt::format("/{}", e->d_name).c_str()) == 0) ++removed;
  }
  closedir(dir);
  return removed;
}

}  // namespace tessera::link::internal
