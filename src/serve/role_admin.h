// A node's live role change: `POST /admin/role {"role":"decode"}` and `GET /admin/role`, both behind the
// cluster credential (docs/security.md). The planner (solver/planner.h) re-roles nodes through it.
//
// A change takes effect at once (PdService::set_role): the node stops taking new work of the old role (a
// client request reaching a node that is now a prefill node is answered 429 `role_changed`, which the router
// retries on another node before any byte went out; a prefill call reaching a node that is now a decode node
// is refused and its caller prefills elsewhere or locally); what it already holds finishes where it is, so no
// token is lost or repeated. Then `on_change` re-registers the node under its new role in the control plane,
// and routers follow through their membership watch (the key stays the same; the value's role changes).
//
// Thread-safety: the handlers run on the HTTP I/O threads; PdService::set_role is thread-safe and
// `on_change` is called under a mutex of this module, so two changes never interleave their registration.
#pragma once

#include <functional>
#include <string>

#include "base/cluster_token.h"
#include "base/status.h"
#include "http/http.h"
#include "serve/pd.h"

namespace tessera::serve {

struct RoleAdminOptions {
  PdService* pd = nullptr;                                   // not owned; null: the node cannot change its role (409)
  std::function<int()> in_flight;                            // calls the node holds now (reported, not waited for)
  std::function<Status(const std::string& role)> on_change;  // re-register; may be empty
  ClusterToken cluster_token;
};

// What a body of POST /admin/role asks for: InvalidArgument (naming the field) unless it is a JSON object
// whose "role" is prefill, decode or both.
Result<std::string> parse_role_request(const std::string& body);

void register_role_routes(http::Server& server, RoleAdminOptions options);

}  // namespace tessera::serve
