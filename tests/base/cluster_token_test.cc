#include "base/cluster_token.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace tessera {
namespace {

constexpr const char* kSecret = "tessera-test-secret-0123456789abcdefXYZ";

std::string temp_path(const char* name) {
  return (std::filesystem::temp_directory_path() / (std::string(name) + "." + std::to_string(::getpid()))).string();
}

TEST(ClusterToken, HmacMatchesOpenSslCommandLine) {
  // printf 'message to sign' | openssl dgst -sha256 -hmac 'tessera-test-secret-0123456789abcdefXYZ'
  auto t = ClusterToken::from_secret(kSecret);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->hmac_hex("message to sign"), "fb7e7ce5dedf25858314511b0e064d6ca20c9ad7b77ed74aa6668a5aad062e81");
  EXPECT_TRUE(t->verify_hmac("message to sign", t->hmac_hex("message to sign")));
  EXPECT_FALSE(t->verify_hmac("message to sigN", t->hmac_hex("message to sign")));
  EXPECT_FALSE(t->verify_hmac("message to sign", ""));
}

TEST(ClusterToken, MatchesOnlyTheExactSecret) {
  auto t = ClusterToken::from_secret(kSecret);
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->matches(kSecret));
  EXPECT_FALSE(t->matches(std::string(kSecret) + "x"));
  EXPECT_FALSE(t->matches(std::string(kSecret).substr(1)));
  EXPECT_FALSE(t->matches(""));
  ClusterToken none;
  EXPECT_FALSE(none.configured());
  EXPECT_FALSE(none.matches(""));
  EXPECT_FALSE(none.verify_hmac("m", none.hmac_hex("m")));
}

TEST(ClusterToken, ShortOrUnprintableSecretsAreRefused) {
  EXPECT_EQ(ClusterToken::from_secret("short").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ClusterToken::from_secret(std::string(40, 'a') + " b").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ClusterToken::from_secret(std::string(40, 'a') + "\r\n").status().code(), StatusCode::kInvalidArgument);
}

TEST(ClusterToken, CreateWritesAPrivateFileThatLoadReads) {
  std::string path = temp_path("tessera-token");
  std::remove(path.c_str());
  auto made = ClusterToken::create(path);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(made->secret().size(), 64u);
  auto loaded = ClusterToken::load(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_TRUE(loaded->matches(made->secret()));
  // Never overwrites an existing token.
  EXPECT_FALSE(ClusterToken::create(path).ok());
  // Two clusters get different tokens.
  std::string other = path + ".2";
  std::remove(other.c_str());
  auto second = ClusterToken::create(other);
  ASSERT_TRUE(second.ok());
  EXPECT_NE(second->secret(), made->secret());
  std::remove(path.c_str());
  std::remove(other.c_str());
}

TEST(ClusterToken, LoadRefusesFilesOthersCanReadAndMissingFiles) {
  std::string path = temp_path("tessera-token-open");
  { std::ofstream(path) << kSecret << "\n"; }
  ::chmod(path.c_str(), 0644);
  auto r = ClusterToken::load(path);
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied) << r.status().to_string();
  ::chmod(path.c_str(), 0600);
  EXPECT_TRUE(ClusterToken::load(path).ok());
  std::remove(path.c_str());
  EXPECT_EQ(ClusterToken::load(path).status().code(), StatusCode::kNotFound);
}

TEST(ClusterToken, ConstantTimeEqualIsEquality) {
  EXPECT_TRUE(constant_time_equal("", ""));
  EXPECT_TRUE(constant_time_equal("abc", "abc"));
  EXPECT_FALSE(constant_time_equal("abc", "abd"));
  EXPECT_FALSE(constant_time_equal("abc", "ab"));
  EXPECT_FALSE(constant_time_equal("", "a"));
}

}  // namespace
}  // namespace tessera
