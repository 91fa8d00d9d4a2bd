#include "ops/registry.h"

#include <gtest/gtest.h>

namespace tessera::ops {
namespace {

TEST(Registry, OpensTheReferenceDevice) {
  auto d = open_device("ref");
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ((*d)->info().backend, "ref");
  EXPECT_TRUE((*d)->info().host_visible);
}

TEST(Registry, UnknownBackendListsTheKnownOnes) {
  auto d = open_device("tpu");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kNotFound);
  EXPECT_NE(d.status().message().find("'tpu'"), std::string::npos);
  EXPECT_NE(d.status().message().find("ref"), std::string::npos);
}

TEST(Registry, DeviceIndexOutOfRange) {
  auto d = open_device("ref", 3);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kNotFound);
}

TEST(Registry, DuplicateNamesAreRefused) {
  register_builtin_backends();
  Status s = BackendRegistry::global().add(
      {"ref", "again", [] { return Result<std::unique_ptr<Backend>>(unavailable("x")); }});
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists);
}

TEST(Registry, OpNamesAreStable) {
  EXPECT_EQ(op_name(Op{MatMulOp{}}), "matmul");
  EXPECT_EQ(op_name(Op{AttentionDecodeOp{}}), "attention_decode");
  EXPECT_EQ(op_name(Op{ArgmaxOp{}}), "argmax");
}

}  // namespace
}  // namespace tessera::ops
