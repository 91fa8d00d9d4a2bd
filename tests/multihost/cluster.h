// A multi-host Tessera cluster on one machine: hosts are network namespaces on a Linux bridge (ip netns,
// veth), 10.S.0.k/24 on eth0 with S from the process id (so concurrent runs never share names or subnets); the
// test itself sits on the bridge at 10.S.0.254, as a client elsewhere on the network would. A second bridge
// (eth1, 10.S.1.k/24) carries etcd's peer traffic only, so that one member can be cut off from its peers
// while its clients still reach it (this machine's kernel has no tc drop action nor netfilter to do it on
// one interface). Each process runs in
// its host's namespace under its own UTS namespace (hostname "host-a", ...), so it reports that host's
// identity, and nothing can take the shared-memory shortcut between "hosts".
//
// Everything is removed however the test ends: processes are killed, then namespaces and the bridge
// deleted; namespaces left by a run that crashed (its process id is gone) are removed at the next start.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "support/process.h"

namespace tessera::multihost {

class Hosts {
 public:
  explicit Hosts(int count);
  ~Hosts();
  // "" when the hosts are up, else why they could not be made (the caller skips with it).
  std::string create();
  bool created() const { return created_; }
  std::string ns(int k) const;            // k = 0 for host A
  std::string address(int k) const;       // 10.S.0.(k+1), eth0
  std::string peer_address(int k) const;  // 10.S.1.(k+1), eth1: etcd peers only
  std::string hostname(int k) const { return std::string("host-") + static_cast<char>('a' + k); }
  // argv that runs `argv` on host k.
  std::vector<std::string> on(int k, const std::vector<std::string>& argv) const;
  // The host's link to the bridge goes down (packets vanish, nothing is reset) / comes back.
  bool cut(int k);
  bool restore(int k);
  // Host k's peer interface (eth1) goes down / comes back: its etcd member is cut off from the others,
  // while clients still reach it on eth0 (and hear "no leader").
  bool isolate_etcd(int k);
  bool rejoin_etcd(int k);

 private:
  std::string prefix_, bridge_;
  int subnet_;
  int count_;
  bool created_ = false;
};

bool sh(const std::string& cmd);

}  // namespace tessera::multihost
