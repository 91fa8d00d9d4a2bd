#include "router/pd_pairing.h"

#include <limits>

namespace tessera::router {

double pairing_load(const NodeSnapshot& node) {
  return static_cast<double>(node.in_flight) / (node.capacity > 0 ? node.capacity : 1);
}

bool same_host(const NodeSnapshot& a, const NodeSnapshot& b) { return !a.host_id.empty() && a.host_id == b.host_id; }

std::optional<PdPair> choose_pd_pair(std::span<const NodeSnapshot> decodes, std::span<const NodeSnapshot> prefills,
                                     const PairingOptions& options, uint64_t rotation) {
  if (decodes.empty() || prefills.empty()) return std::nullopt;
  const size_t n = decodes.size() * prefills.size();
  std::optional<PdPair> best;
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (k + rotation) % n;
    PdPair p;
    p.decode = i / prefills.size();
    p.prefill = i % prefills.size();
    p.same_host = same_host(decodes[p.decode], prefills[p.prefill]);
    p.cost = options.decode_weight * pairing_load(decodes[p.decode]) +
             options.prefill_weight * pairing_load(prefills[p.prefill]) + (p.same_host ? 0 : options.tcp_link_cost);
    // Strictly cheaper only: the first of equal pairs in rotated order wins.
    if (!best || p.cost < best->cost - 1e-12) best = p;
  }
  return best;
}

PdRoute choose_pd_route(std::span<const NodeSnapshot> decodes, std::span<const NodeSnapshot> prefills,
                        std::span<const NodeSnapshot> colocated, const PairingOptions& options, uint64_t rotation) {
  PdRoute out;
  out.pair = choose_pd_pair(decodes, prefills, options, rotation);
  std::optional<double> best;
  for (size_t k = 0; k < colocated.size(); ++k) {
    const size_t i = (k + rotation) % colocated.size();
    const double cost = (options.decode_weight + options.prefill_weight) * pairing_load(colocated[i]);
    if (!best || cost < *best - 1e-12) {
      best = cost;
      out.colocated = i;
    }
  }
  if (out.pair && out.colocated) {
    if (*best < out.pair->cost - 1e-12) {
      out.pair.reset();
    } else {
      out.colocated.reset();
    }
  }
  return out;
}

}  // namespace tessera::router
