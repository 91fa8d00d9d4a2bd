// The opencl backend's own behaviour beyond the conformance suite: the on-disk kernel binary cache, and
// data-dependent errors that kernels can only flag (reported by the next synchronize or read).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "ops/registry.h"
#include "support/paths.h"

namespace tessera::ops {
namespace {

Result<std::unique_ptr<Device>> open_opencl(const std::string& cache_dir) {
  register_builtin_backends();
  auto names = BackendRegistry::global().names();
  if (std::find(names.begin(), names.end(), "opencl") == names.end()) {
    return not_found("this binary was built without the opencl backend (no OpenCL SDK at configure time)");
  }
  return open_device("opencl", 0, DeviceOptions{2, cache_dir});
}

TEST(OpenCl, SecondOpenLoadsKernelsFromTheBinaryCache) {
  const std::string dir = testing::scratch_dir() + "/cache";
  auto first = open_opencl(dir);
  if (!first.ok()) GTEST_SKIP() << "opencl not available here: " << first.status().message();
  EXPECT_NE((*first)->info().name.find("compiled from source, stored in the binary cache"), std::string::npos)
      << (*first)->info().name;
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files += e.path().extension() == ".bin";
  EXPECT_EQ(files, 1u);
  auto second = open_opencl(dir);
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  EXPECT_NE((*second)->info().name.find("from the binary cache"), std::string::npos) << (*second)->info().name;
  EXPECT_FALSE((*second)->info().host_visible);
}

TEST(OpenCl, OutOfRangeIdsAndSlotsAreErrorsNotCrashes) {
  auto dev = open_opencl(testing::scratch_dir());
  if (!dev.ok()) GTEST_SKIP() << "opencl not available here: " << dev.status().message();
  Device& d = **dev;
  std::unique_ptr<Stream> s = d.create_stream();
  std::vector<std::unique_ptr<Buffer>> keep;
  auto make = [&](DType t, std::initializer_list<int64_t> shape) {
    Tensor x(nullptr, 0, t, shape);
    keep.push_back(std::move(d.alloc(x.bytes())).value());
    x.buffer = keep.back().get();
    return x;
  };
  Tensor table = make(DType::kF32, {4, 8}), ids = make(DType::kI32, {2}), out = make(DType::kF32, {2, 8});
  const int32_t bad[] = {1, 9};
  ASSERT_TRUE(s->upload(ids, bad).ok());
  ASSERT_TRUE(s->run(EmbeddingOp{table, ids, out}).ok());  // enqueued; the kernel flags the bad id
  Status st = s->synchronize();
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.to_string();
  EXPECT_TRUE(s->synchronize().ok()) << "the flag is cleared once reported";

  Tensor kc = make(DType::kF32, {1, 4, 1, 8}), vc = make(DType::kF32, {1, 4, 1, 8});
  Tensor k = make(DType::kF32, {1, 1, 8}), slots = make(DType::kI32, {1});
  const int32_t slot = 4;
  ASSERT_TRUE(s->upload(slots, &slot).ok());
  ASSERT_TRUE(s->run(KvWriteOp{k, k, kc, vc, slots}).ok());
  std::vector<float> host(16);
  EXPECT_EQ(s->download(out, host.data()).code(), StatusCode::kOutOfRange);
  // Unsupported weight types are refused up front, with the reason.
  Tensor wq = make(DType::kQ5_1, {4, 32});
  Support sup = d.supports(MatMulOp{make(DType::kF32, {1, 32}), wq, make(DType::kF32, {1, 4})});
  EXPECT_FALSE(sup.supported);
  EXPECT_NE(sup.reason.find("q5_1"), std::string::npos) << sup.reason;
  EXPECT_TRUE(d.supports(MatMulOp{make(DType::kF32, {1, 32}), make(DType::kQ8_0, {4, 32}), make(DType::kF32, {1, 4})})
                  .supported);
}

}  // namespace
}  // namespace tessera::ops
