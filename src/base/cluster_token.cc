#include "base/cluster_token.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "fmt/format.h"

namespace tessera {
namespace {

std::string to_hex(const unsigned char* data, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = digits[data[i] >> 4];
    out[2 * i + 1] = digits[data[i] & 15];
  }
  return out;
}

std::string trim(std::string s) {
  const char* ws = " \t\r\n";
  size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}

}  // namespace

bool constant_time_equal(std::string_view a, std::string_view b) {
  // Always walk the longer length so an early mismatch in length or content costs the same.
  size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

Result<std::string> random_hex(size_t n) {
  std::string bytes(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(bytes.data()), static_cast<int>(n)) != 1)
    return internal_error("the system random generator failed");
  return to_hex(reinterpret_cast<const unsigned char*>(bytes.data()), n);
}

Result<ClusterToken> ClusterToken::from_secret(std::string secret) {
  if (secret.size() < kMinSecretBytes)
    return invalid_argument(
        fmt::format("a cluster token needs at least {} characters (got {})", kMinSecretBytes, secret.size()));
  for (char c : secret)
    if (static_cast<unsigned char>(c) < 0x21 || static_cast<unsigned char>(c) > 0x7e)
      return invalid_argument("a cluster token is printable ASCII without spaces (it travels in an HTTP header)");
  return ClusterToken(std::move(secret));
}

Result<ClusterToken> ClusterToken::load(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return not_found(fmt::format("cluster token file {}: {}", path, std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) return invalid_argument(fmt::format("cluster token file {} is not a file", path));
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
    return permission_denied(fmt::format("cluster token file {} may be read by other users (mode {:o}); chmod 600 it",
                                         path, st.st_mode & 0777));
  std::ifstream in(path);
  if (!in) return not_found(fmt::format("cannot read cluster token file {}", path));
  std::stringstream ss;
  ss << in.rdbuf();
  std::string secret = trim(ss.str());
  if (secret.find('\n') != std::string::npos)
    return invalid_argument(fmt::format("cluster token file {} holds more than one line", path));
  auto token = from_secret(std::move(secret));
  if (!token.ok()) return token.status().with_context(fmt::format("cluster token file {}", path));
  return token;
}

Result<ClusterToken> ClusterToken::create(const std::string& path) {
  TS_ASSIGN_OR_RETURN(std::string secret, random_hex(32));
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return unavailable(fmt::format("cannot create cluster token file {}: {}", path, std::strerror(errno)));
  std::string line = secret + "\n";
  bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  ok = ::close(fd) == 0 && ok;
  if (!ok) {
    ::unlink(path.c_str());
    return unavailable(fmt::format("cannot write cluster token file {}", path));
  }
  return ClusterToken(std::move(secret));
}

bool ClusterToken::matches(std::string_view presented) const {
  if (secret_.empty()) return false;
  return constant_time_equal(presented, secret_);
}

std::string ClusterToken::hmac_hex(std::string_view message) const {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret_.data(), static_cast<int>(secret_.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &len);
  return to_hex(mac, len);
}

bool ClusterToken::verify_hmac(std::string_view message, std::string_view mac_hex) const {
  if (secret_.empty()) return false;
  return constant_time_equal(hmac_hex(message), mac_hex);
}

}  // namespace tessera
