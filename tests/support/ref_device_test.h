// A test fixture over the ref device: tensors of given values in its memory (kept until the test ends), read back
// as vectors, and a tolerance check. The hand-worked operator tests (ref_ops, ref_moe, ref_encoder_ops) and the
// host checks of the cuda kernels' arithmetic against ref (cuda_math) derive from it.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <memory>
#include <vector>

#include "ops/backend.h"
#include "ops/registry.h"

namespace tessera::testing {

class RefDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto d = ops::open_device("ref");
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    device_ = std::move(d).value();
    stream_ = device_->create_stream();
  }
  // A tensor of `dtype` in the device's memory, uploaded from `data` (left as allocated when null).
  ops::Tensor make(DType dtype, std::initializer_list<int64_t> shape, const void* data = nullptr) {
    ops::Tensor t(nullptr, 0, dtype, shape);
    auto b = device_->alloc(t.bytes());
    EXPECT_TRUE(b.ok());
    t.buffer = b->get();
    buffers_.push_back(std::move(b).value());
    if (data) {
      EXPECT_TRUE(stream_->upload(t, data).ok());
    }
    return t;
  }
  ops::Tensor f32(std::initializer_list<int64_t> shape, const std::vector<float>& v) {
    ops::Tensor t = make(DType::kF32, shape);
    EXPECT_EQ(static_cast<size_t>(t.numel()), v.size());
    EXPECT_TRUE(stream_->upload(t, v.data()).ok());
    return t;
  }
  ops::Tensor i32(std::initializer_list<int64_t> shape, const std::vector<int32_t>& v) {
    ops::Tensor t = make(DType::kI32, shape);
    EXPECT_EQ(static_cast<size_t>(t.numel()), v.size());
    EXPECT_TRUE(stream_->upload(t, v.data()).ok());
    return t;
  }
  template <typename T = float>
  std::vector<T> get(const ops::Tensor& t) {
    std::vector<T> out(static_cast<size_t>(t.numel()));
    EXPECT_TRUE(stream_->download(t, out.data()).ok());
    return out;
  }
  void expect_near(const std::vector<float>& got, const std::vector<float>& want, float tol = 1e-5f) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
  }

  std::unique_ptr<ops::Device> device_;
  std::unique_ptr<ops::Stream> stream_;
  std::vector<std::unique_ptr<ops::Buffer>> buffers_;
};

}  // namespace tessera::testing
