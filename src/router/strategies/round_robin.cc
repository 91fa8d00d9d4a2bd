// round_robin: each node in turn. The cursor counts requests, so with a stable membership every node gets
// the same share whatever the order of the snapshot's nodes (they come sorted by URL).
#include "router/strategies/builtin.h"

namespace tessera::router {
namespace {

class RoundRobin final : public Strategy {
 public:
  std::string_view name() const override { return "round_robin"; }
  size_t pick(const RouteRequest&, std::span<const NodeSnapshot> nodes) override { return next_++ % nodes.size(); }

 private:
  uint64_t next_ = 0;
};

}  // namespace

std::unique_ptr<Strategy> make_round_robin(const StrategyOptions&) { return std::make_unique<RoundRobin>(); }

}  // namespace tessera::router
