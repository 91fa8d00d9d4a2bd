// ClusterToken: the shared secret that members of one Tessera cluster prove to each other.
//
// Every plane between processes (the control plane, /internal/pd/*, /admin/*, link connections) requires it
// (docs/security.md). A token lives in a file (`--cluster-token-file`), created by `tessera up` with mode 0600
// unless one is given; the file holds one line of at least 32 characters. HTTP callers present it in the
// `x-tessera-cluster-token` header; link peers prove it without sending it (HMAC-SHA256 over the other side's
// nonce). Comparisons run in constant time so a caller cannot learn the token a byte at a time.
//
// An empty token means "no credential configured": matches() then refuses everything, and callers decide
// whether a plane is open (a single-user development run) or closed. Thread-safety: immutable after
// construction; every method may be called from any thread.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace tessera {

inline constexpr std::string_view kClusterTokenHeader = "x-tessera-cluster-token";

class ClusterToken {
 public:
  static constexpr size_t kMinSecretBytes = 32;

  ClusterToken() = default;  // no credential configured
  // A token from its secret (at least kMinSecretBytes); for tests and for callers that hold the secret.
  static Result<ClusterToken> from_secret(std::string secret);
  // Reads the token file: one line, surrounding whitespace ignored. Refuses a file that other users may read
  // (group or world permission bits), a missing file and a secret shorter than kMinSecretBytes.
  static Result<ClusterToken> load(const std::string& path);
  // Writes a new random token (64 hex characters) to `path` with mode 0600; refuses to overwrite a file.
  static Result<ClusterToken> create(const std::string& path);

  bool configured() const { return !secret_.empty(); }
  const std::string& secret() const { return secret_; }

  // True when `presented` equals the secret (constant time in the secret's length); false when no token is
  // configured.
  bool matches(std::string_view presented) const;
  // HMAC-SHA256 of `message` keyed by the secret, as 64 lowercase hex characters.
  std::string hmac_hex(std::string_view message) const;
  // True when `mac_hex` is hmac_hex(message) (constant time); false when no token is configured.
  bool verify_hmac(std::string_view message, std::string_view mac_hex) const;

 private:
  explicit ClusterToken(std::string secret) : secret_(std::move(secret)) {}
  std::string secret_;
};

// Constant-time equality of two strings (the time depends only on their lengths).
bool constant_time_equal(std::string_view a, std::string_view b);
// `n` random bytes from the operating system's generator, as 2n lowercase hex characters.
Result<std::string> random_hex(size_t n);

}  // namespace tessera
