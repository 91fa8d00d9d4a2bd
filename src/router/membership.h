// Membership: where the router learns which nodes exist. A MembershipSource pushes add/update/remove events
// to a listener; the gateway is the listener. Two sources: the static list of `--nodes` (plus the admin API,
// which calls the same listener), and the control plane (`--ctrl`, ctrl_membership.h: the nodes registered
// in a ctrl store with leases, kept current by its watch).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace tessera::router {

struct NodeSpec {
  std::string url;                  // http://host:port
  double capacity = 0;              // <= 0: learn it from the node's /health
  std::string role;                 // "both", "prefill", "decode"; empty: unknown (learnt from GET /internal/pd/info)
  std::string backend;              // informational ("cpu", "opencl", ...)
  std::string host_id;              // equal for nodes on one host (link::local_host_id()); empty: unknown
  std::vector<std::string> models;  // the model names it serves; empty: unknown (learnt from its /health)
};

class MembershipListener {
 public:
  virtual ~MembershipListener() = default;
  virtual void on_node_added(const NodeSpec& node) = 0;
  virtual void on_node_removed(const std::string& url) = 0;
  // A known node's role, capacity or host changed.
  virtual void on_node_updated(const NodeSpec& node) {}
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
