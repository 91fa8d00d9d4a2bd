// Discovery: how an agent finds a peer by name. The control plane (ctrl/) plugs in here; before one exists,
// or in tests, the "static" discovery holds addresses given directly. Implementations register by name.
//
// Thread-safety: implementations are internally synchronised.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/registry.h"
#include "base/status.h"

namespace tessera::link {

// Where one endpoint of an agent listens.
struct PeerAddress {
  std::string endpoint;  // "shm", "tcp", ...
  std::string address;
};

// What a peer needs to connect to an agent.
struct AgentInfo {
  std::string name;
  std::string host_id;  // equal for two agents on one host (boot id + host name)
  std::vector<PeerAddress> addresses;

  // One line: "name=a host=H shm=/tmp/x.sock tcp=127.0.0.1:4711".
  std::string encode() const;
  static Result<AgentInfo> decode(std::string_view text);
};

class Discovery {
 public:
  virtual ~Discovery() = default;
  // Makes `self` findable (and keeps it so while the agent lives, where the store has leases).
  virtual Status publish(const AgentInfo& self) = 0;
  virtual Status withdraw(const std::string& name) = 0;
  virtual Result<AgentInfo> lookup(const std::string& name) = 0;
};

// The "static" discovery: an in-process table. Two agents in one process can share one; agents in two
// processes each get the other's AgentInfo added by hand (e.g. passed on a command line).
class StaticDiscovery final : public Discovery {
 public:
  Status publish(const AgentInfo& self) override;
  Status withdraw(const std::string& name) override;
  Result<AgentInfo> lookup(const std::string& name) override;

 private:
  std::mutex mu_;
  std::map<std::string, AgentInfo> agents_;  // guarded by mu_
};

// `config` is implementation specific (a store URL for "ctrl"). Unknown names list the known ones.
using DiscoveryFactory = std::function<Result<std::unique_ptr<Discovery>>(const std::string& config)>;
using DiscoveryRegistry = Registry<DiscoveryFactory>;  // base/registry.h
// The process's registry, with the built-ins ("static", "ctrl") in it.
DiscoveryRegistry& discovery_registry();
// AlreadyExists for a taken name.
Status register_discovery(const std::string& name, DiscoveryFactory factory);
Result<std::unique_ptr<Discovery>> make_discovery(const std::string& name, const std::string& config);

// This host's identity for AgentInfo::host_id.
std::string local_host_id();

}  // namespace tessera::link
