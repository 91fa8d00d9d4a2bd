// The repository's one real model (models/stories260K) is what every greedy-output test stands on: its
// files must be exactly the published ones, and its SOURCE.md must say so. A swapped or truncated file fails
// here, with the digest it has, before it can make other tests pass or fail for the wrong reason.
#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <fstream>
#include <sstream>
#include <string>

#include "support/paths.h"

namespace tessera {
namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string sha256_hex(const std::string& data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(data.data(), data.size(), md, &n, EVP_sha256(), nullptr);
  std::string out;
  char buf[3];
  for (unsigned int i = 0; i < n; ++i) {
    std::snprintf(buf, sizeof buf, "%02x", md[i]);
    out += buf;
  }
  return out;
}

struct BundledFile {
  const char* name;
  size_t bytes;
  const char* sha256;
};

// The digests of the files as released (llama2.c's tinyllamas stories260K) and of run.c's greedy output.
constexpr BundledFile kFiles[] = {
    {"stories260K.bin", 1056540, "b0a507e7ad0f626624f17112325e66691f9076d622e1d3274d103d00299f2696"},
    {"tok512.bin", 6227, "037cb335abb25d1fa9e8ecae30ed2a3a8ace9302862ebcdc05d51a6bbb10c312"},
    {"tok512.model", 7522, "fec6aa960a1fb3ebf71d26f9b0e486afcbd76c34cf0fbfb93e21126ca9f778d3"},
    {"greedy-256.txt", 566, "a3213f9ea026d75bf2993355ae334822d7c9d34328964c711ab030d3148e6cef"},
};

TEST(BundledModel, FilesAreTheReleasedOnes) {
  const std::string dir = testing::source_dir() + "/models/stories260K";
  for (const BundledFile& f : kFiles) {
    std::string data = read_all(dir + "/" + f.name);
    EXPECT_EQ(data.size(), f.bytes) << f.name;
    EXPECT_EQ(sha256_hex(data), f.sha256) << f.name << " differs from the released file";
  }
}

TEST(BundledModel, SourceNamesOriginLicenseAndEveryDigest) {
  const std::string source = read_all(testing::source_dir() + "/models/stories260K/SOURCE.md");
  ASSERT_FALSE(source.empty()) << "models/stories260K/SOURCE.md is missing";
  EXPECT_NE(source.find("MIT"), std::string::npos);
  EXPECT_NE(source.find("Karpathy"), std::string::npos);
  for (const BundledFile& f : kFiles) {
    std::string row = std::string("| ") + f.name + " | " + std::to_string(f.bytes) + " | " + f.sha256 + " |";
    EXPECT_NE(source.find(row), std::string::npos) << "SOURCE.md lacks the row: " << row;
  }
}

}  // namespace
}  // namespace tessera
