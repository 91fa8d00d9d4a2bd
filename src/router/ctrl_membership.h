// CtrlMembership: the router's nodes as the control plane knows them (`tessera route --ctrl`).
//
// Every `tessera serve --ctrl` node keeps a ctrl::NodeInfo under /tessera/nodes/<id> alive with a lease
// (ctrl/registry.h). This source announces the nodes found there (range), then follows the store's watch:
// a node that registers is added, one that deregisters or whose lease expires is removed, a changed role,
// capacity or host is an update. Entries with role "router" and entries whose address is not an
// http://host:port URL are skipped.
//
// Outages: when the store cannot be reached the listener keeps the last membership it was told (the router
// goes on serving) and this source retries every `retry_interval`. When the store answers again it re-reads
// the whole list: new nodes are added at once, but nodes missing from it are removed only if they are still
// missing `removal_grace` later, because a restarted embedded store comes back empty and live nodes need up
// to a third of their lease TTL to re-register. Deletions pushed by the watch (a lease expiring, a node
// deregistering) apply at once. A full re-read every `reread_interval` repairs events a watch missed.
//
// Threads: one thread of its own (re-reads and retries) plus the watch's callback thread; listener calls
// are serialised (never two at once). start() returns after the first read, or after the first failure
// to read (the store may come later).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "ctrl/store.h"
#include "router/membership.h"

namespace tessera::router {

struct CtrlMembershipOptions {
  std::chrono::milliseconds retry_interval{250};
  std::chrono::milliseconds removal_grace{3000};
  // A full re-read this often even when the watch reports nothing: repairs anything a watch can miss (an
  // etcd restarted with fresh revision numbers answers a watch from an old revision with silence).
  std::chrono::milliseconds reread_interval{5000};
};

std::unique_ptr<MembershipSource> make_ctrl_membership(std::unique_ptr<ctrl::Store> store,
                                                       CtrlMembershipOptions options = {});

// The NodeSpec a registry entry describes; InvalidArgument for a bad entry, NotFound for a router entry.
Result<NodeSpec> node_spec_from_ctrl(const std::string& value);

}  // namespace tessera::router
