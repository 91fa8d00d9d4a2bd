#include "auth_flags.h"

#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/mapped_file.h"

namespace tessera::cli {

Result<ClusterToken> cluster_token_from_flag(const std::string& path) {
  if (path.empty()) return ClusterToken();
  auto token = ClusterToken::load(path);
  if (!token.ok()) return token.status().with_context("--cluster-token-file");
  return token;
}

void warn_if_open(const ClusterToken& token, std::string_view command, std::string_view planes) {
  if (token.configured()) return;
  std::fprintf(stderr,
               "tessera %.*s: warning: no --cluster-token-file: %.*s accept anyone who can reach them "
               "(fine for a single-user machine; see docs/security.md)\n",
               static_cast<int>(command.size()), command.data(), static_cast<int>(planes.size()), planes.data());
}

Result<ctrl::StoreAuth> store_auth_from_flags(const ClusterToken& token, const std::string& tls_ca,
                                              const std::string& etcd_user, const std::string& etcd_password_file) {
  ctrl::StoreAuth auth{.cluster_token = token, .tls_ca_file = tls_ca, .etcd_user = etcd_user};
  if (etcd_user.empty() != etcd_password_file.empty()) {
    return invalid_argument("--etcd-user and --etcd-password-file go together");
  }
  if (!etcd_password_file.empty()) {
    // read_file refuses a named pipe or device at once (an ifstream would wait for a writer, deaf to SIGTERM).
    auto text = read_file(etcd_password_file);
    if (!text.ok()) return text.status().with_context("--etcd-password-file");
    auth.etcd_password = text->substr(0, text->find('\n'));
    if (!auth.etcd_password.empty() && auth.etcd_password.back() == '\r') auth.etcd_password.pop_back();
    if (auth.etcd_password.empty()) {
      return invalid_argument(fmt::format("cannot read a password from --etcd-password-file {}", etcd_password_file));
    }
  }
  return auth;
}

Status check_tls_flags(const std::string& cert, const std::string& key) {
  if (cert.empty() != key.empty()) return invalid_argument("--tls-cert and --tls-key go together");
  return ok_status();
}

Result<std::vector<std::string>> parse_allowed_origins(const std::vector<std::string>& values) {
  std::vector<std::string> out;
  for (const std::string& v : values) {
    if (!v.empty() && v.front() == '[') {
      const nlohmann::json j = nlohmann::json::parse(v, nullptr, false);
      if (!j.is_array()) return invalid_argument(fmt::format("--allowed-origins '{}' is not a JSON list", v));
      for (const auto& e : j) {
        if (!e.is_string()) return invalid_argument(fmt::format("--allowed-origins '{}': origins are strings", v));
        out.push_back(e.get<std::string>());
      }
      continue;
    }
    size_t start = 0;
    while (start <= v.size()) {
      const size_t comma = v.find(',', start);
      std::string o = v.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      // CLI11 takes a bracketed list apart itself and leaves each element's quotes on.
      while (!o.empty() && (o.front() == ' ' || o.front() == '"' || o.front() == '\'' || o.front() == '['))
        o.erase(0, 1);
      while (!o.empty() && (o.back() == ' ' || o.back() == '"' || o.back() == '\'' || o.back() == ']')) o.pop_back();
      if (!o.empty()) out.push_back(o);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  for (const std::string& o : out) {
    if (o != "*" && o.rfind("http://", 0) != 0 && o.rfind("https://", 0) != 0)
      return invalid_argument(fmt::format("--allowed-origins: '{}' is not an origin (https://host[:port] or *)", o));
  }
  return out;
}

}  // namespace tessera::cli
