// Transfer loops, ceilings and statistics of `tessera link bench` (bench.h).
#include "link/bench.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <exception>
#include <utility>

#include <fmt/format.h>

namespace tessera::link {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

Result<uint64_t> parse_byte_size(const std::string& s) {
  if (s.empty()) return invalid_argument("empty size");
  const std::string bad = fmt::format("size '{}' is not a number with an optional K/M/G suffix", s);
  if (s[0] < '0' || s[0] > '9') return invalid_argument(bad);  // stoull would take "-1" and " 1"
  size_t end = 0;
  uint64_t v = 0;
  try {
    v = std::stoull(s, &end);
  } catch (const std::exception&) {
    return invalid_argument(bad);
  }
  const std::string unit = s.substr(end);
  const uint64_t mult = unit.empty()  ? 1
                        : unit == "K" ? 1ull << 10
                        : unit == "M" ? 1ull << 20
                        : unit == "G" ? 1ull << 30
                                      : 0;
  if (mult == 0 || v == 0) return invalid_argument(bad);
  return v * mult;
}

Result<std::vector<uint64_t>> parse_byte_sizes(const std::string& spec) {
  std::vector<uint64_t> out;
  const size_t dots = spec.find("..");
  if (dots != std::string::npos) {
    TS_ASSIGN_OR_RETURN(uint64_t lo, parse_byte_size(spec.substr(0, dots)));
    TS_ASSIGN_OR_RETURN(uint64_t hi, parse_byte_size(spec.substr(dots + 2)));
    if (lo > hi) return invalid_argument(fmt::format("size range '{}' runs backwards", spec));
    for (uint64_t s = lo; s <= hi; s *= 2) out.push_back(s);
    return out;
  }
  size_t start = 0;
  while (start <= spec.size()) {
    const size_t comma = spec.find(',', start);
    TS_ASSIGN_OR_RETURN(uint64_t v, parse_byte_size(spec.substr(start, comma - start)));
    out.push_back(v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string human_bytes(uint64_t n) {
  if (n >= (1ull << 20) && n % (1ull << 20) == 0) return fmt::format("{}M", n >> 20);
  if (n >= 1024 && n % 1024 == 0) return fmt::format("{}K", n >> 10);
  return fmt::format("{}", n);
}

uint64_t slot_offset(uint64_t i, uint64_t size, uint64_t region) {
  const uint64_t slots = std::max<uint64_t>(1, region / size);
  return (i % slots) * size;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[i];
}

Spread spread(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

Result<TransferRun> measure_transfers(Agent& agent, const std::string& peer, RegionId local, RegionId remote,
                                      uint64_t region, uint64_t size, const TransferPattern& p) {
  TransferRun r;
  std::deque<std::pair<TransferFuture, Clock::time_point>> window;
  uint64_t bytes = 0, transfers = 0, slot = 0;
  const auto t0 = Clock::now();
  auto retire = [&]() -> Status {
    auto [f, start] = std::move(window.front());
    window.pop_front();
    TS_RETURN_IF_ERROR(f.wait());
    r.latency_ms.push_back(seconds_since(start) * 1e3);
    return ok_status();
  };
  while (seconds_since(t0) < p.seconds || transfers < 4) {
    std::vector<Assignment> batch;
    for (int i = 0; i < p.batch; ++i, ++slot) {
      const uint64_t off = slot_offset(slot, size, region);
      batch.push_back({local, off, remote, off, size});
    }
    const auto start = Clock::now();
    TransferFuture f = p.read ? agent.read(peer, std::move(batch)) : agent.write(peer, std::move(batch));
    window.emplace_back(std::move(f), start);
    bytes += size * static_cast<uint64_t>(p.batch);
    ++transfers;
    if (static_cast<int>(window.size()) >= p.depth) TS_RETURN_IF_ERROR(retire());
  }
  while (!window.empty()) TS_RETURN_IF_ERROR(retire());
  r.gbps = static_cast<double>(bytes) / seconds_since(t0) / 1e9;
  return r;
}

double measure_memcpy(const std::byte* src, std::byte* dst, uint64_t region, uint64_t size, const TransferPattern& p) {
  uint64_t bytes = 0, slot = 0;
  const auto t0 = Clock::now();
  while (seconds_since(t0) < p.seconds || bytes < 4 * size) {
    for (int i = 0; i < p.batch; ++i, ++slot) {
      const uint64_t off = slot_offset(slot, size, region);
      std::memcpy(dst + off, src + off, size);
      bytes += size;
    }
  }
  return static_cast<double>(bytes) / seconds_since(t0) / 1e9;
}

}  // namespace tessera::link
