#include "auth_flags.h"

#include <cstdio>

#include <fmt/format.h>

namespace tessera::cli {

Result<ClusterToken> cluster_token_from_flag(const std::string& path, std::string_view command,
                                             std::string_view planes) {
  if (path.empty()) {
    std::fprintf(stderr,
                 "tessera %.*s: warning: no --cluster-token-file: %.*s accept anyone who can reach them "
                 "(fine for a single-user machine; see docs/security.md)\n",
                 static_cast<int>(command.size()), command.data(), static_cast<int>(planes.size()), planes.data());
    return ClusterToken();
  }
  auto token = ClusterToken::load(path);
  if (!token.ok()) return token.status().with_context("--cluster-token-file");
  return token;
}

Status check_tls_flags(const std::string& cert, const std::string& key) {
  if (cert.empty() != key.empty()) return invalid_argument("--tls-cert and --tls-key go together");
  return ok_status();
}

}  // namespace tessera::cli
