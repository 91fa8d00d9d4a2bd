#include "base/log.h"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace tessera::log {
namespace {
std::atomic<int> g_level{static_cast<int>(Level::kWarn)};
std::mutex g_mu;  // keeps lines from different threads whole
}  // namespace

void set_level(Level l) { g_level.store(static_cast<int>(l), std::memory_order_relaxed); }
Level level() { return static_cast<Level>(g_level.load(std::memory_order_relaxed)); }

void write(Level l, std::string_view message) {
  static constexpr const char* kNames[] = {"debug", "info", "warn", "error"};
  std::lock_guard<std::mutex> lock(g_mu);
  std::fprintf(stderr, "[%s] %.*s\n", kNames[static_cast<int>(l)], static_cast<int>(message.size()), message.data());
}

}  // namespace tessera::log
