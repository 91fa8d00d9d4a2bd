// The schedule of the `faulty` link endpoint: which operations are dropped, delayed, corrupted or cut off.
//
// A spec is a comma-separated list of key=value items, e.g.
//   over=tcp,seed=7,corrupt=nth:1,drop=p:0.05,delay=every:4,delay_ms=20,disconnect=after:100
//   over=NAME        the endpoint that carries the bytes (default tcp; never faulty)
//   seed=N           seeds the p: selectors (default 1)
//   delay_ms=N       how long a delayed operation waits (default 10)
//   ACTION=SELECTOR  ACTION is drop, delay, corrupt or disconnect; SELECTOR picks operations by their number
//                    n = 1, 2, ... in the order they were submitted through this endpoint:
//                      nth:N     only operation N          every:N   operations N, 2N, 3N, ...
//                      first:N   operations 1..N           after:N   every operation after the Nth
//                      p:F       each operation with probability F (0..1), decided by a hash of (seed, n,
//                                action): the same spec and seed pick the same operations on every run
// The schedule is a pure function of the spec and n, so tests can say in advance what will happen.
//
// Thread-safety: FaultSpec is a plain value; decide() is pure.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace tessera::link {

enum class FaultAction : uint8_t { kDrop, kDelay, kCorrupt, kDisconnect };
std::string_view fault_action_name(FaultAction action);

struct FaultRule {
  enum class Kind : uint8_t { kNth, kEvery, kFirst, kAfter, kProbability };
  FaultAction action = FaultAction::kDrop;
  Kind kind = Kind::kNth;
  uint64_t n = 0;  // nth/every/first/after
  double p = 0.0;  // probability
};

struct FaultSpec {
  std::string over = "tcp";
  uint64_t seed = 1;
  int delay_ms = 10;
  std::vector<FaultRule> rules;
};

// InvalidArgument naming the bad item and the accepted forms.
Result<FaultSpec> parse_fault_spec(std::string_view text);

// What happens to operation `n` (1-based).
struct FaultDecision {
  bool drop = false;
  bool delay = false;
  bool corrupt = false;
  bool disconnect = false;
  bool any() const { return drop || delay || corrupt || disconnect; }
};
FaultDecision decide(const FaultSpec& spec, uint64_t n);

// A seeded 64-bit hash (splitmix64 finaliser over the mixed inputs), also used to pick corrupted bytes.
uint64_t fault_hash(uint64_t seed, uint64_t n, uint64_t salt);

}  // namespace tessera::link
