// EtcdCluster: a real 3-member etcd cluster (/usr/bin/etcd, apt package etcd-server) for tests, each member on
// free loopback ports with its own data directory, with short election timeouts so that a lost member is
// noticed within a second. Members can be killed and started again on the same ports and data.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/process.h"
#include "base/status.h"

namespace tessera::ctrl::testing {

class EtcdCluster {
 public:
  // Starts `members` members under `dir` and waits until every one answers a linearizable read.
  static Result<std::unique_ptr<EtcdCluster>> start(const std::string& dir, int members = 3);
  ~EtcdCluster();
  int size() const { return static_cast<int>(members_.size()); }
  int client_port(int i) const { return members_[i].client_port; }
  std::string url(int i) const;
  // "http://127.0.0.1:A,http://127.0.0.1:B,..." (the form `--ctrl etcd=...` takes).
  std::string urls() const;
  void kill(int i);
  // Starts member i again (same ports, same data) and waits until it answers.
  Status restart(int i);

 private:
  struct Member {
    std::string name, dir;
    int client_port = 0, peer_port = 0;
    std::optional<tessera::Process> child;
  };
  Status spawn(int i, const std::string& state);
  Status wait_ready(int i);
  std::vector<Member> members_;
  std::string initial_cluster_;
};

}  // namespace tessera::ctrl::testing
