// Endpoints: the plug-ins that carry a link's bytes (shm/, tcp/, ...), each one folder behind this interface
// and registered by name. An Endpoint listens for peers and connects to them; a Connection executes the
// chunks of operations to one peer. Callers choose an endpoint by its capabilities (EndpointCaps), never by
// comparing names.
//
// Thread-safety: Endpoint and Connection methods may be called from any thread.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/cluster_token.h"
#include "base/registry.h"
#include "base/status.h"
#include "link/internal/op_state.h"
#include "link/link.h"

namespace tessera::link {

namespace internal {
class AgentCore;
}

// Tuning shared by every connection of an agent.
struct LinkOptions {
  int streams = 4;               // connections striped per peer (lanes)
  uint64_t split_threshold = 0;  // assignments longer than this are split into chunks; 0: the endpoint default
  uint64_t max_inflight_bytes = 64ull << 20;  // per peer; more waits in a queue (backpressure)
  // Per peer on this host over a socket (tcp over loopback): two 1 MiB chunks, so the bytes between the
  // sender's copy into the socket and the receiver's copy out stay in the CPUs' caches. Measured: 64 MiB
  // in flight gave 85-92% of the raw-socket ceiling at >= 4 MiB, 2 MiB 104-134% (docs/benchmarks.md).
  uint64_t same_host_inflight_bytes = 2ull << 20;
  std::string faults;  // the faulty endpoint's schedule (faulty/fault_schedule.h); empty: TESSERA_LINK_FAULTS
  // Proven by both sides at connection set-up (HMAC over the other side's nonce, accept_loop.h); a peer that
  // cannot prove it is refused. Unconfigured: peers without a token are accepted (open mode).
  ClusterToken cluster_token;
};

struct EndpointCaps {
  bool same_host_only = false;          // usable only when both agents run on one host (shm)
  bool one_sided_data = false;          // the data path copies without the peer's CPU
  int preference = 0;                   // among usable endpoints the highest wins
  uint64_t default_split = 1ull << 20;  // chunk size when LinkOptions::split_threshold is 0
};

class Connection {
 public:
  virtual ~Connection() = default;
  virtual const std::string& peer() const = 0;
  virtual std::string_view endpoint() const = 0;
  // Hands over the validated chunks of one operation (op->remaining already counts them).
  virtual void submit(std::shared_ptr<internal::Operation> op, std::vector<internal::Chunk> chunks) = 0;
  // Fails chunks not yet on the wire with `why`, waits up to `timeout` for the rest, then closes.
  virtual void drain_and_close(Status why, std::chrono::milliseconds timeout) = 0;
  // Fails everything pending with `why` and closes the sockets.
  virtual void close(Status why) = 0;
  virtual bool broken() const = 0;
};

struct EndpointConfig {
  std::string host = "127.0.0.1";  // address to listen on (tcp)
  LinkOptions link;
};

class Endpoint {
 public:
  virtual ~Endpoint() = default;
  virtual std::string_view name() const = 0;
  virtual EndpointCaps caps() const = 0;
  // Starts accepting peers for `core`; returns the address peers connect to ("127.0.0.1:4711", a path...).
  virtual Result<std::string> listen(internal::AgentCore& core) = 0;
  virtual Result<std::shared_ptr<Connection>> connect(internal::AgentCore& core, const std::string& peer,
                                                      const std::string& address) = 0;
  // Stops accepting (connections already made stay up).
  virtual void stop() = 0;
};

using EndpointFactory = std::function<std::unique_ptr<Endpoint>(const EndpointConfig&)>;
using EndpointRegistry = Registry<EndpointFactory>;  // base/registry.h

// The process's endpoint registry; register_endpoint() adds to it (AlreadyExists for a taken name).
EndpointRegistry& endpoint_registry();
Status register_endpoint(const std::string& name, EndpointFactory factory);
// An unknown name is NotFound listing the known ones.
Result<std::unique_ptr<Endpoint>> make_endpoint(std::string_view name, const EndpointConfig& config);
std::vector<std::string> endpoint_names();
// Registers shm, tcp (and ucx where built). Idempotent; Agent::create calls it.
void register_builtin_endpoints();

}  // namespace tessera::link
