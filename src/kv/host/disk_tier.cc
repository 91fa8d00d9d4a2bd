#include "kv/host/disk_tier.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/core.h>

#include "base/log.h"

namespace tessera::kv {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr std::string_view kSuffix = ".kvb";

// The chain hash a file name spells ("0123456789abcdef.kvb"), or false.
bool parse_name(const std::string& name, engine::BlockHash* out) {
  if (name.size() != 16 + kSuffix.size() || !name.ends_with(kSuffix)) return false;
  uint64_t v = 0;
  for (size_t i = 0; i < 16; ++i) {
    const char c = name[i];
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    v = v << 4 | static_cast<uint64_t>(d);
  }
  *out = v;
  return true;
}

Status write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return unavailable(fmt::format("cannot create {}: {}", tmp, std::strerror(errno)));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return unavailable(fmt::format("cannot write {}: {}", tmp, std::strerror(e)));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  // A reader sees the whole file or none (a crash between may leave garbage under the final name: the
  // checksums refuse it).
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    return unavailable(fmt::format("cannot rename {}: {}", tmp, std::strerror(e)));
  }
  return ok_status();
}

Result<std::vector<uint8_t>> read_file(const std::string& path, size_t expect) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return not_found(fmt::format("{}: {}", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != expect) {
    ::close(fd);
    return data_loss(
        fmt::format("{} holds {} bytes, a block record {}", path, static_cast<int64_t>(st.st_size), expect));
  }
  std::vector<uint8_t> out(expect);
  size_t done = 0;
  while (done < expect) {
    const ssize_t n = ::read(fd, out.data() + done, expect - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (done != expect) return data_loss(fmt::format("{}: short read", path));
  return out;
}

}  // namespace

Result<std::unique_ptr<DiskTier>> DiskTier::open(DiskTierOptions options, BlockFormat format,
                                                 const std::string& identity) {
  if (options.dir.empty()) return invalid_argument("the KV disk tier needs a directory (--kv-disk-dir)");
  const std::string path = fmt::format("{}/{:016x}", options.dir, format.store_key);
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) return invalid_argument(fmt::format("cannot create the KV disk tier directory {}: {}", path, ec.message()));
  // For people: which model and layout these files are for (never read back: the store key in every file is).
  {
    std::ofstream f(path + "/IDENTITY");
    f << identity << "\nblock_tokens " << format.geometry.block_tokens << "\ndtype "
      << dtype_name(format.geometry.dtype) << "\n";
    if (!f) return invalid_argument(fmt::format("cannot write to the KV disk tier directory {}", path));
  }
  std::unique_ptr<DiskTier> t(new DiskTier(std::move(options), format, path));
  // Index what a previous run left, oldest first; remove interrupted writes.
  struct Found {
    engine::BlockHash hash;
    uint64_t bytes;
    fs::file_time_type time;
  };
  std::vector<Found> found;
  for (const fs::directory_entry& e : fs::directory_iterator(path, ec)) {
    const std::string name = e.path().filename().string();
    if (name.ends_with(".tmp")) {
      fs::remove(e.path(), ec);
      continue;
    }
    engine::BlockHash h = 0;
    if (!e.is_regular_file(ec) || !parse_name(name, &h)) continue;
    found.push_back({h, static_cast<uint64_t>(e.file_size(ec)), e.last_write_time(ec)});
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.time < b.time; });
  {
    std::lock_guard<std::mutex> lock(t->mu_);
    for (const Found& f : found) t->index_locked(f.hash, f.bytes);
    while (t->stats_.bytes > t->options_.capacity_bytes && !t->lru_.empty()) {
      t->forget_locked(t->lru_.front(), true);
      t->stats_.evicted_blocks++;
    }
  }
  if (!found.empty()) log::info("KV disk tier {}: {} blocks from a previous run", path, t->stats_.blocks);
  t->thread_ = std::thread([p = t.get()] { p->run(); });
  return t;
}

DiskTier::DiskTier(DiskTierOptions options, BlockFormat format, std::string path)
    : options_(std::move(options)), format_(format), path_(std::move(path)) {
  stats_.capacity_bytes = options_.capacity_bytes;
}

DiskTier::~DiskTier() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string DiskTier::file_of(engine::BlockHash hash) const {
  return fmt::format("{}/{:016x}{}", path_, hash, kSuffix);
}

void DiskTier::set_event_log(engine::KvEventLog* log) {
  std::lock_guard<std::mutex> lock(mu_);
  events_ = log;
  if (log == nullptr) return;
  for (const engine::BlockHash h : lru_) {
    log->publish(engine::KvEventType::kStored, h, engine::KvTier::kDisk);
    if (file_has_state_locked(files_.at(h))) log->publish_state(engine::KvEventType::kStored, h, engine::KvTier::kDisk);
  }
}

void DiskTier::index_locked(engine::BlockHash hash, uint64_t bytes) {
  auto it = files_.find(hash);
  if (it != files_.end()) {
    lru_.splice(lru_.end(), lru_, it->second.lru);
    stats_.bytes += bytes - it->second.bytes;  // rewritten with the state
    const bool had_state = file_has_state_locked(it->second);
    it->second.bytes = bytes;
    if (events_ != nullptr && !had_state && file_has_state_locked(it->second))
      events_->publish_state(engine::KvEventType::kStored, hash, engine::KvTier::kDisk);
    return;
  }
  const File file{bytes, lru_.insert(lru_.end(), hash)};
  if (events_ != nullptr) {
    events_->publish(engine::KvEventType::kStored, hash, engine::KvTier::kDisk);
    if (file_has_state_locked(file)) events_->publish_state(engine::KvEventType::kStored, hash, engine::KvTier::kDisk);
  }
  files_.emplace(hash, file);
  stats_.blocks++;
  stats_.bytes += bytes;
}

void DiskTier::forget_locked(engine::BlockHash hash, bool remove_file) {
  auto it = files_.find(hash);
  if (it == files_.end()) return;
  if (events_ != nullptr) {
    events_->publish(engine::KvEventType::kRemoved, hash, engine::KvTier::kDisk);
    if (file_has_state_locked(it->second))
      events_->publish_state(engine::KvEventType::kRemoved, hash, engine::KvTier::kDisk);
  }
  stats_.blocks--;
  stats_.bytes -= it->second.bytes;
  lru_.erase(it->second.lru);
  files_.erase(it);
  if (remove_file) ::unlink(file_of(hash).c_str());
}

bool DiskTier::contains(engine::BlockHash hash, bool* with_state) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto p = pending_.find(hash); p != pending_.end()) {
    if (with_state != nullptr) *with_state = format_.holds_state(*p->second);
    return true;
  }
  auto f = files_.find(hash);
  if (f == files_.end()) return false;
  if (with_state != nullptr) *with_state = format_.geometry.state_bytes > 0 && file_has_state_locked(f->second);
  return true;
}

void DiskTier::write(std::shared_ptr<const HostBlock> block) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    const bool state = format_.holds_state(*block);
    if (auto p = pending_.find(block->hash); p != pending_.end()) {
      if (!state || format_.holds_state(*p->second)) return;  // queued already, with all this record has
      // A queued record without the state: this one replaces it (or, when that one is being written now, follows it).
      bool queued = false;
      for (auto& q : writes_) {
        if (q->hash != block->hash) continue;
        q = block;
        queued = true;
      }
      pending_bytes_ += block->payload.size() - p->second->payload.size();
      p->second = block;
      if (!queued) writes_.push_back(std::move(block));
      cv_.notify_all();
      return;
    }
    if (auto f = files_.find(block->hash); f != files_.end() && (!state || file_has_state_locked(f->second))) return;
    pending_bytes_ += block->payload.size();
    pending_.emplace(block->hash, block);
    writes_.push_back(std::move(block));
    while (pending_bytes_ > options_.max_pending_bytes && writes_.size() > 1) {
      const std::shared_ptr<const HostBlock> old = std::move(writes_.front());
      writes_.pop_front();
      pending_.erase(old->hash);
      pending_bytes_ -= old->payload.size();
      stats_.dropped_writes++;
    }
  }
  cv_.notify_all();
}

void DiskTier::read(std::vector<engine::BlockHash> hashes, std::shared_ptr<std::atomic<bool>> cancelled,
                    ReadDone done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    reads_.push_back({std::move(hashes), std::move(cancelled), std::move(done)});
  }
  cv_.notify_all();
}

void DiskTier::flush() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] { return (writes_.empty() && reads_.empty() && !busy_) || stopping_; });
}

DiskTierStats DiskTier::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void DiskTier::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !reads_.empty() || !writes_.empty(); });
    if (!reads_.empty() && !stopping_) {
      Read r = std::move(reads_.front());
      reads_.pop_front();
      busy_ = true;
      lock.unlock();
      do_read(r);
      lock.lock();
      busy_ = false;
    } else if (!writes_.empty()) {
      // A clean shutdown still writes what is queued (bounded by max_pending_bytes).
      std::shared_ptr<const HostBlock> b = std::move(writes_.front());
      writes_.pop_front();
      busy_ = true;
      lock.unlock();
      do_write(b);
      lock.lock();
      busy_ = false;
      // (Unless a record with the state replaced it meanwhile: that one is queued.)
      if (auto p = pending_.find(b->hash); p != pending_.end() && p->second == b) {
        pending_.erase(p);
        pending_bytes_ -= b->payload.size();
      }
    } else if (stopping_) {
      reads_.clear();
      idle_cv_.notify_all();
      return;
    }
    if (reads_.empty() && writes_.empty()) idle_cv_.notify_all();
  }
}

void DiskTier::do_write(const std::shared_ptr<const HostBlock>& block) {
  const auto t0 = Clock::now();
  const std::vector<uint8_t> bytes = encode_block_file(format_, *block);
  const Status st = write_file(file_of(block->hash), bytes);
  std::lock_guard<std::mutex> lock(mu_);
  if (!st.ok()) {
    log::warn("KV disk tier: {}", st.message());
    stats_.dropped_writes++;
    return;
  }
  stats_.written_blocks++;
  stats_.written_bytes += bytes.size();
  stats_.write_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  index_locked(block->hash, bytes.size());
  while (stats_.bytes > options_.capacity_bytes && !lru_.empty()) {
    forget_locked(lru_.front(), true);
    stats_.evicted_blocks++;
  }
}

void DiskTier::do_read(Read& r) {
  const auto t0 = Clock::now();
  std::vector<std::shared_ptr<const HostBlock>> got;
  uint64_t read_bytes = 0;
  for (engine::BlockHash h : r.hashes) {
    if (r.cancelled && *r.cancelled) return;
    size_t expect = 0;  // the file's size: a record with the state section or without
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto p = pending_.find(h); p != pending_.end()) {  // not written yet: the queued record is the block
        got.push_back(p->second);
        continue;
      }
      auto f = files_.find(h);
      if (f == files_.end()) break;  // evicted since it was matched
      expect = file_has_state_locked(f->second) && format_.geometry.state_bytes > 0
                   ? kBlockHeaderBytes + format_.payload_bytes(true)
                   : kBlockHeaderBytes + format_.payload_bytes();
    }
    const std::string path = file_of(h);
    auto bytes = read_file(path, expect);
    Result<std::shared_ptr<const HostBlock>> b =
        bytes.ok() ? decode_block_file(format_, h, *bytes) : Result<std::shared_ptr<const HostBlock>>(bytes.status());
    std::lock_guard<std::mutex> lock(mu_);
    if (!b.ok()) {
      // Missing (deleted meanwhile) ends the run quietly; anything else is a bad file: never used, removed.
      if (b.status().code() != StatusCode::kNotFound) {
        log::warn("KV disk tier: {} refused ({}); its positions are recomputed", path, b.status().message());
        stats_.failed_blocks++;
        forget_locked(h, true);
      } else {
        forget_locked(h, false);
      }
      break;
    }
    read_bytes += expect;
    index_locked(h, expect);  // the most recently used now, here and (by its time) after a restart
    ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
    got.push_back(std::move(*b));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.read_blocks += got.size();
    stats_.read_bytes += read_bytes;
    stats_.read_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  }
  if (r.cancelled && *r.cancelled) return;
  r.done(std::move(got));
}

}  // namespace tessera::kv
