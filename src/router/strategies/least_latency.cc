// least_latency: the node expected to finish this request soonest, where expected latency is the node's
// queued work (outstanding prompt + output tokens, this request's included) divided by its measured speed
// (tokens/s EWMA kept by the registry). Ties go to the lower index.
#include "router/strategies/builtin.h"

namespace tessera::router {
namespace {

class LeastLatency final : public Strategy {
 public:
  std::string_view name() const override { return "least_latency"; }
  size_t pick(const RouteRequest& r, std::span<const NodeSnapshot> nodes) override {
    const int64_t work = r.prompt_tokens + r.max_tokens;
    size_t best = 0;
    double best_s = expected_latency_s(nodes[0], work);
    for (size_t i = 1; i < nodes.size(); ++i) {
      const double s = expected_latency_s(nodes[i], work);
      if (s < best_s) best = i, best_s = s;
    }
    return best;
  }
};

}  // namespace

std::unique_ptr<Strategy> make_least_latency(const StrategyOptions&) { return std::make_unique<LeastLatency>(); }

}  // namespace tessera::router
