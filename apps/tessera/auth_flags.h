// The credential flags several subcommands share (serve, route, ctrl, up, link bench): loading
// --cluster-token-file, and the one startup warning a process gives when it runs without one
// (docs/security.md).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/cluster_token.h"
#include "base/status.h"
#include "ctrl/store.h"

namespace tessera::cli {

// The token in `path`; with an empty path, no token (the open mode).
Result<ClusterToken> cluster_token_from_flag(const std::string& path);
// Once the process is up (after every flag error, which must stay a one-line message): without a token, one
// warning on stderr that `command`'s internal planes (`planes`) are open to anyone who can reach them.
void warn_if_open(const ClusterToken& token, std::string_view command, std::string_view planes);

// The control-plane credentials of --ctrl: the cluster token, the CA file for https://, and for etcd a user
// with the password read from `etcd_password_file` (first line; a file so that it stays out of `ps`).
Result<ctrl::StoreAuth> store_auth_from_flags(const ClusterToken& token, const std::string& tls_ca,
                                              const std::string& etcd_user, const std::string& etcd_password_file);

// Both or neither of --tls-cert / --tls-key.
Status check_tls_flags(const std::string& cert, const std::string& key);

// --allowed-origins as vLLM takes it (a JSON list: '["https://a.example", "*"]') or as a comma-separated or
// repeated list: the origins whose browsers may call the server (CORS; none by default).
Result<std::vector<std::string>> parse_allowed_origins(const std::vector<std::string>& flag_values);

}  // namespace tessera::cli
