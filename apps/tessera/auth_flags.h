// The credential flags several subcommands share (serve, route, ctrl, up, link bench): loading
// --cluster-token-file, and the one startup warning a process gives when it runs without one
// (docs/security.md).
#pragma once

#include <string>
#include <string_view>

#include "base/cluster_token.h"
#include "base/status.h"

namespace tessera::cli {

// The token in `path`; with an empty path, no token, and one warning on stderr that `command`'s internal
// planes (`planes`) are open to anyone who can reach them.
Result<ClusterToken> cluster_token_from_flag(const std::string& path, std::string_view command,
                                             std::string_view planes);

// Both or neither of --tls-cert / --tls-key.
Status check_tls_flags(const std::string& cert, const std::string& key);

}  // namespace tessera::cli
