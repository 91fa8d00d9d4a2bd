// PD pairing: in prefill/decode mode the router chooses the (decode node, prefill node) pair for a request
// jointly, instead of letting the decode node pick a prefill node on its own.
//
// Cost of a pair = decode_weight x load(decode) + prefill_weight x load(prefill) + link cost, where a node's
// load is the requests the router has in flight on it per unit of relative capacity (for a prefill node:
// requests the router paired with it that are still running), and the link cost is 0 when both nodes report
// the same host id (the KV moves over shared memory) and `tcp_link_cost` otherwise (or when a host is not
// known). The cheapest pair wins; among equal costs the choice rotates with `rotation`, so that an idle
// cluster still spreads requests. The gateway sends the request to the chosen decode node with the header
// x-tessera-prefill-node (api/headers.h) naming the prefill node (docs/pd-protocol.md); the decode node still decides
// whether the prompt is worth prefilling remotely at all (its prefix cache), and falls back to its own list if the
// named prefill node fails.
//
// Pure functions: values in, a choice out.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "base/status.h"
#include "router/strategy.h"

namespace tessera::router {

struct PairingOptions {
  double decode_weight = 1;
  double prefill_weight = 1;
  double tcp_link_cost = 0.5;  // in units of load (requests in flight per unit of capacity)
};

struct PdPair {
  size_t decode = 0;   // index into the decode nodes
  size_t prefill = 0;  // index into the prefill nodes
  double cost = 0;
  bool same_host = false;  // the KV goes over shm
};

// Requests in flight per unit of capacity.
double pairing_load(const NodeSnapshot& node);
bool same_host(const NodeSnapshot& a, const NodeSnapshot& b);

// nullopt when either list is empty.
std::optional<PdPair> choose_pd_pair(std::span<const NodeSnapshot> decodes, std::span<const NodeSnapshot> prefills,
                                     const PairingOptions& options, uint64_t rotation = 0);

// A node's GET /internal/pd/info body is read by api::parse_pd_info (api/pd_messages.h).

// PD mode with colocated nodes (role "both") beside the decode nodes: a colocated node counts as a pair of
// one (it prefills and decodes, no link), cost (decode_weight + prefill_weight) x load. The cheapest wins;
// a tie goes to the disaggregated pair.
struct PdRoute {
  std::optional<PdPair> pair;       // set: send to decodes[pair->decode] naming prefills[pair->prefill]
  std::optional<size_t> colocated;  // set: send to colocated[*colocated] whole
};
PdRoute choose_pd_route(std::span<const NodeSnapshot> decodes, std::span<const NodeSnapshot> prefills,
                        std::span<const NodeSnapshot> colocated, const PairingOptions& options, uint64_t rotation = 0);

}  // namespace tessera::router
