// weighted_random: a node at random with probability proportional to its capacity (from --nodes URL=W, the
// admin API, or the KV blocks its /health reports).
#include "base/rng.h"
#include "router/strategies/builtin.h"

namespace tessera::router {
namespace {

class WeightedRandom final : public Strategy {
 public:
  explicit WeightedRandom(uint64_t seed) : rng_(seed) {}
  std::string_view name() const override { return "weighted_random"; }
  size_t pick(const RouteRequest&, std::span<const NodeSnapshot> nodes) override {
    double total = 0;
    for (const auto& n : nodes) total += n.capacity;
    // 53 random bits from two draws: next_f32() alone would quantise small weights away.
    const double u = ((static_cast<uint64_t>(rng_.next_u32()) << 21) ^ rng_.next_u32()) / 9007199254740992.0;
    double x = u * total;
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (x < nodes[i].capacity) return i;
      x -= nodes[i].capacity;
    }
    return nodes.size() - 1;
  }

 private:
  Rng rng_;
};

}  // namespace

std::unique_ptr<Strategy> make_weighted_random(const StrategyOptions& o) {
  return std::make_unique<WeightedRandom>(o.seed);
}

}  // namespace tessera::router
