// link::Agent: one per process. Owns the registered memory regions, listens on its endpoints, connects to
// peer agents (by AgentInfo, or by name through a Discovery), and runs batched transfers.
//
//   auto agent = link::Agent::create({.name = "prefill-0"});
//   RegionId kv = *agent->allocate_region(64 << 20);            // shareable host memory
//   agent->connect("decode-0");                                  // via options.discovery
//   Status s = agent->write("decode-0", {{kv, 0, remote_kv, 0, 4096}}).wait();
//
// Endpoint choice: among the endpoints both sides listen on, the usable one (shm only on the same host) with
// the highest preference (EndpointCaps) wins; if connecting fails the next one is tried.
// Ownership: regions from allocate_region() are owned by the agent; register_region() memory stays the
// caller's and must outlive every transfer that names it.
// Thread-safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "link/device_memory.h"
#include "link/discovery.h"
#include "link/endpoint.h"
#include "link/future.h"
#include "link/link.h"

namespace tessera::link {

struct AgentOptions {
  std::string name;                                     // unique among the agents that talk to each other
  std::vector<std::string> endpoints = {"shm", "tcp"};  // endpoints to listen on and use
  std::string host = "127.0.0.1";                       // tcp listen address
  LinkOptions link;
  Discovery* discovery = nullptr;  // optional; not owned; the agent publishes itself there
};

class Agent {
 public:
  static Result<std::unique_ptr<Agent>> create(AgentOptions options);
  virtual ~Agent() = default;

  virtual const std::string& name() const = 0;
  virtual const AgentInfo& info() const = 0;

  // Zeroed host memory in a POSIX shared-memory segment (reachable by the shm endpoint's one-copy path).
  virtual Result<RegionId> allocate_region(uint64_t length) = 0;
  // Caller-owned host memory (moved through the framed path by every endpoint).
  virtual Result<RegionId> register_region(void* data, uint64_t length) = 0;
  // Device memory behind a backend's DeviceMemory hook.
  virtual Result<RegionId> register_device_region(std::shared_ptr<DeviceMemory> memory) = 0;
  // Later accesses from peers are rejected (NotFound) without touching the memory.
  virtual Status unregister_region(RegionId id) = 0;
  // The bytes of a host region.
  virtual Result<std::span<std::byte>> host_bytes(RegionId id) const = 0;
  virtual Result<RegionDesc> describe(RegionId id) const = 0;

  // Connects to a peer (replacing a broken connection to it).
  virtual Status connect(const AgentInfo& peer) = 0;
  virtual Status connect(const std::string& peer) = 0;  // looks the peer up through options.discovery
  // The endpoint in use towards `peer` ("shm", "tcp"), NotFound when not connected.
  virtual Result<std::string> endpoint_to(const std::string& peer) const = 0;

  // One-sided: copy remote -> local (read) or local -> remote (write). Local pieces are checked here
  // (NotFound, OutOfRange) before anything moves; remote pieces are checked by the peer.
  virtual TransferFuture read(const std::string& peer, std::vector<Assignment> batch) = 0;
  virtual TransferFuture write(const std::string& peer, std::vector<Assignment> batch) = 0;
  // A write whose `tag` reaches the peer (next_notification) exactly once, after all of its data.
  virtual TransferFuture write_with_imm(const std::string& peer, std::vector<Assignment> batch, uint64_t tag) = 0;
  // Two-sided: send gathers the local pieces into one message; recv scatters the next message from `peer`
  // over its local pieces (the sizes must match exactly).
  virtual TransferFuture send(const std::string& peer, std::vector<Assignment> batch) = 0;
  virtual TransferFuture recv(const std::string& peer, std::vector<Assignment> batch) = 0;

  // The next immediate tag from any peer; DeadlineExceeded after `timeout`.
  virtual Result<Notification> next_notification(std::chrono::milliseconds timeout) = 0;

  // Stops new work, fails transfers not yet started with Unavailable, lets started ones finish for up to
  // `drain_timeout`, then closes every connection (failing what is left). Idempotent.
  virtual void shutdown(std::chrono::milliseconds drain_timeout) = 0;
};

}  // namespace tessera::link
