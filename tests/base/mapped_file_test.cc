#include "base/mapped_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>

#include "support/paths.h"

namespace tessera {
namespace {

TEST(MappedFile, MapsAWholeFile) {
  std::string path = testing::scratch_dir() + "/data.bin";
  std::string text = "hello, mapped world";
  ASSERT_TRUE(write_file_atomic(path, {reinterpret_cast<const uint8_t*>(text.data()), text.size()}).ok());
  auto f = MappedFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>((*f)->data()), (*f)->size()), text);
  EXPECT_EQ(*read_file(path), text);
}

TEST(MappedFile, ErrorsNameTheProblem) {
  std::string dir = testing::scratch_dir();
  auto missing = MappedFile::open(dir + "/nope.bin");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope.bin"), std::string::npos);

  auto directory = MappedFile::open(dir);
  ASSERT_FALSE(directory.ok());
  EXPECT_EQ(directory.status().code(), StatusCode::kInvalidArgument);

  // A named pipe without a writer: refused at once, not waited on.
  const std::string fifo = dir + "/pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(MappedFile::open(fifo).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(read_file(fifo).status().code(), StatusCode::kInvalidArgument);

  std::string empty = dir + "/empty.bin";
  ASSERT_TRUE(write_file_atomic(empty, {}).ok());
  auto e = MappedFile::open(empty);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("empty"), std::string::npos);
}

}  // namespace
}  // namespace tessera
