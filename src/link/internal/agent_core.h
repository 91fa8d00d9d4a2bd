// What an endpoint sees of its agent: the region table, the inboxes, and where accepted connections go.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "link/internal/region.h"
#include "link/link.h"

namespace tessera::link {
class Connection;
}

namespace tessera::link::internal {

class AgentCore {
 public:
  virtual ~AgentCore() = default;
  virtual const std::string& name() const = 0;
  virtual std::shared_ptr<Region> find_region(RegionId id) const = 0;
  virtual void deliver_notification(Notification n) = 0;
  // ResourceExhausted when the peer's unclaimed messages (no recv posted) already hold too much memory: the
  // sender's send() then fails instead of this agent buffering whatever a peer sends.
  virtual Status deliver_message(const std::string& peer, std::vector<std::byte> bytes) = 0;
  // An endpoint accepted a connection from `conn->peer()`.
  virtual void adopt_connection(std::shared_ptr<Connection> conn) = 0;
};

}  // namespace tessera::link::internal
