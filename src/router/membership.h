// Membership: where the router learns which nodes exist. A MembershipSource pushes add/remove events to a
// listener; the gateway is the listener. Today there is one source, the static list of `--nodes` (plus the
// admin API, which calls the same listener). The control plane (`--ctrl URL`, src/ctrl, watches with leases)
// plugs in as another source without changing the gateway.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace tessera::router {

struct NodeSpec {
  std::string url;      // http://host:port
  double capacity = 0;  // <= 0: learn it from the node's /health
};

class MembershipListener {
 public:
  virtual ~MembershipListener() = default;
  virtual void on_node_added(const NodeSpec& node) = 0;
  virtual void on_node_removed(const std::string& url) = 0;
};

class MembershipSource {
 public:
  virtual ~MembershipSource() = default;
  // Announces the current members, then keeps pushing changes until stop().
  virtual Status start(MembershipListener& listener) = 0;
  virtual void stop() = 0;
};

// A fixed list, announced once.
std::unique_ptr<MembershipSource> make_static_membership(std::vector<NodeSpec> nodes);

// Parses "URL[=CAPACITY],URL..." (the --nodes flag). InvalidArgument for a bad URL or capacity.
Result<std::vector<NodeSpec>> parse_node_list(const std::string& list);
// "http://host:port" with no trailing slash or path; InvalidArgument otherwise.
Result<std::string> normalize_node_url(const std::string& url);

}  // namespace tessera::router
