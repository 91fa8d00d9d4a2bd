// The measuring half of `tessera link bench`: transfer loops over a link and their ceilings, and the sizes,
// offsets and statistics the command reports. The command (apps/tessera/link_bench.cc) starts the peer
// process, the agent and the raw TCP sink (link/raw_tcp.h), and prints the table.
//
// Access pattern, shared by the link loop and both ceilings: the i-th assignment of a size uses the i-th
// slot of that size in a region, wrapping, so consecutive transfers touch fresh memory.
// Thread-safety: free functions; each call uses only what it is given.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "link/agent.h"

namespace tessera::link {

// "4096", "4K", "1M", "2G" (powers of 1024); zero and other suffixes are InvalidArgument.
Result<uint64_t> parse_byte_size(const std::string& s);
// "4K..256M" (powers of two from..to) or "4K,1M,64M".
Result<std::vector<uint64_t>> parse_byte_sizes(const std::string& spec);
// 1048576 -> "1M", 4096 -> "4K", 1000 -> "1000".
std::string human_bytes(uint64_t n);

// Offset of the i-th assignment: consecutive slots of `size` bytes, wrapping inside `region` bytes.
uint64_t slot_offset(uint64_t i, uint64_t size, uint64_t region);

// The value at fraction p of the sorted values (p = 0.5: upper median; 0 when empty).
double percentile(std::vector<double> values, double p);

struct Spread {
  double median = 0, lo = 0, hi = 0;
};
// Median (upper), minimum and maximum; values must not be empty.
Spread spread(std::vector<double> values);

struct TransferPattern {
  int batch = 1;         // assignments per transfer
  int depth = 4;         // transfers in flight
  double seconds = 0.3;  // measuring time (at least 4 transfers)
  bool read = false;     // read from the peer instead of writing to it
};

struct TransferRun {
  double gbps = 0;                 // bytes moved / wall time, 1e9 bytes per second
  std::vector<double> latency_ms;  // per transfer, from issue to completion
};

// Transfers of `size`-byte assignments between `local` and the peer's `remote` (both at least `region`
// bytes), `depth` in flight, for the pattern's time.
Result<TransferRun> measure_transfers(Agent& agent, const std::string& peer, RegionId local, RegionId remote,
                                      uint64_t region, uint64_t size, const TransferPattern& pattern);

// memcpy between two buffers of this process with the same access pattern and volume: the shm ceiling.
double measure_memcpy(const std::byte* src, std::byte* dst, uint64_t region, uint64_t size,
                      const TransferPattern& pattern);

}  // namespace tessera::link
