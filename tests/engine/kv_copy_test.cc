// KV export/import moves whole runs of blocks: on a counting fake backend (the reference backend behind a
// Stream that counts every device copy), a layer's positions cost one copy per contiguous run of blocks for K
// and one for V, never one per position, and the bytes land exactly where the paged layout says
// (slot = block * block_tokens + row, checked against the cache's memory, not against the copy code).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "base/quant.h"
#include "engine/model_runner.h"
#include "model/loader.h"
#include "ops/registry.h"
#include "support/paths.h"

namespace tessera::engine {
namespace {

std::vector<BlockId> ids(std::initializer_list<int32_t> raw) {
  std::vector<BlockId> out;
  for (int32_t b : raw) out.push_back(static_cast<BlockId>(b));
  return out;
}

struct Counts {
  int reads = 0;   // device -> host copies
  int writes = 0;  // host -> device copies
  int copy_runs_calls = 0;
};

// Everything goes to the reference backend; copy_runs is the base class's (one read()/write() per run), so
// the counts are the device copies a backend would make.
class CountingStream final : public ops::Stream {
 public:
  CountingStream(std::unique_ptr<ops::Stream> inner, Counts& counts) : inner_(std::move(inner)), counts_(counts) {}
  Status run(const ops::Op& op) override { return inner_->run(op); }
  Status write(ops::Buffer& dst, size_t offset, const void* src, size_t bytes) override {
    counts_.writes++;
    return inner_->write(dst, offset, src, bytes);
  }
  Status read(ops::Buffer& src, size_t offset, void* dst, size_t bytes) override {
    counts_.reads++;
    return inner_->read(src, offset, dst, bytes);
  }
  Status synchronize() override { return inner_->synchronize(); }
  Status copy_runs(ops::Buffer& buffer, ops::HostStaging& staging, std::span<const ops::CopyRun> runs,
                   ops::CopyDirection dir) override {
    counts_.copy_runs_calls++;
    return Stream::copy_runs(buffer, staging, runs, dir);
  }

 private:
  std::unique_ptr<ops::Stream> inner_;
  Counts& counts_;
};

class CountingDevice final : public ops::Device {
 public:
  CountingDevice(std::unique_ptr<ops::Device> inner, Counts& counts) : inner_(std::move(inner)), counts_(counts) {}
  const ops::DeviceInfo& info() const override { return inner_->info(); }
  Result<std::unique_ptr<ops::Buffer>> alloc(size_t bytes) override { return inner_->alloc(bytes); }
  ops::Support supports(const ops::Op& op) const override { return inner_->supports(op); }
  std::unique_ptr<ops::Stream> create_stream() override {
    return std::make_unique<CountingStream>(inner_->create_stream(), counts_);
  }

 private:
  std::unique_ptr<ops::Device> inner_;
  Counts& counts_;
};

class KvCopyTest : public ::testing::Test {
 protected:
  static constexpr int kBlockTokens = 16;
  void SetUp() override {
    TS_REQUIRE_STORIES260K();
    auto m = model::load_model(testing::stories260k_dir());
    ASSERT_TRUE(m.ok());
    model_ = std::move(m).value();
    device_ = std::make_unique<CountingDevice>(std::move(ops::open_device("ref").value()), counts_);
    RunnerOptions ro;
    ro.kv.block_tokens = kBlockTokens;
    ro.kv.num_blocks = 16;
    runner_ = std::move(ModelRunner::create(*device_, model_.config, model_.weights, ro).value());
    kv_dim_ = static_cast<size_t>(model_.config.kv_dim());
  }
  std::vector<float> random_rows(int count, uint32_t seed) const {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> d(-1, 1);
    std::vector<float> v(static_cast<size_t>(count) * kv_dim_);
    for (float& x : v) x = d(gen);
    return v;
  }
  // The K row of `pos` read straight out of the cache's memory (ref is host-visible).
  std::vector<float> cached_k_row(const SequenceKv& seq, int layer, int pos) {
    const ops::Tensor& k = runner_->kv_cache().k(layer);
    const size_t slot = static_cast<size_t>(seq.blocks[static_cast<size_t>(pos / kBlockTokens)]) * kBlockTokens +
                        static_cast<size_t>(pos % kBlockTokens);
    const auto* base = static_cast<const uint8_t*>(k.buffer->host_ptr()) + k.offset;
    std::vector<float> row(kv_dim_);
    std::memcpy(row.data(), base + slot * kv_dim_ * sizeof(float), kv_dim_ * sizeof(float));
    return row;
  }

  Counts counts_;
  model::LoadedModel model_;
  std::unique_ptr<ops::Device> device_;
  std::unique_ptr<ModelRunner> runner_;
  size_t kv_dim_ = 0;
};

TEST_F(KvCopyTest, OneDeviceCopyPerContiguousRunOfBlocksPerLayer) {
  SequenceKv seq;
  seq.blocks = ids({5, 6, 7, 2, 3, 9});  // three runs: 5-7, 2-3, 9
  const int count = 6 * kBlockTokens;
  const int layers = model_.config.n_layers;
  std::vector<std::vector<float>> k_in, v_in;
  for (int l = 0; l < layers; ++l) {
    k_in.push_back(random_rows(count, 2 * l + 1));
    v_in.push_back(random_rows(count, 2 * l + 2));
  }
  counts_ = {};
  for (int l = 0; l < layers; ++l) {
    ASSERT_TRUE(runner_->import_kv(seq, l, 0, count, DType::kF32, k_in[l].data(), v_in[l].data()).ok());
  }
  EXPECT_EQ(counts_.writes, layers * 3 * 2);  // 3 runs, K and V, per layer (one per position would be 192)
  EXPECT_EQ(counts_.reads, 0);
  EXPECT_EQ(counts_.copy_runs_calls, layers * 2);
  for (int pos : {0, 17, 47, 48, 63, 64, 80, 95}) {
    std::vector<float> want(k_in[1].begin() + static_cast<std::ptrdiff_t>(pos * kv_dim_),
                            k_in[1].begin() + static_cast<std::ptrdiff_t>((pos + 1) * kv_dim_));
    EXPECT_EQ(cached_k_row(seq, 1, pos), want) << "position " << pos;
  }

  counts_ = {};
  for (int l = 0; l < layers; ++l) {
    std::vector<float> k(k_in[l].size()), v(v_in[l].size());
    ASSERT_TRUE(runner_->export_kv(seq, l, 0, count, DType::kF32, k.data(), v.data()).ok());
    EXPECT_EQ(k, k_in[l]);
    EXPECT_EQ(v, v_in[l]);
  }
  EXPECT_EQ(counts_.reads, layers * 3 * 2);
  EXPECT_EQ(counts_.writes, 0);
}

TEST_F(KvCopyTest, PartialBlocksAndOneBlockTableRunEachAreOneCopy) {
  SequenceKv seq;
  seq.blocks = ids({1, 2, 8});
  const std::vector<float> k_in = random_rows(3 * kBlockTokens, 7), v_in = random_rows(3 * kBlockTokens, 8);
  ASSERT_TRUE(runner_->import_kv(seq, 0, 0, 3 * kBlockTokens, DType::kF32, k_in.data(), v_in.data()).ok());
  // Positions [5, 45): the tail of block 1, all of block 2 (contiguous with 1), the head of block 8.
  counts_ = {};
  std::vector<float> k(40 * kv_dim_), v(40 * kv_dim_);
  ASSERT_TRUE(runner_->export_kv(seq, 0, 5, 40, DType::kF32, k.data(), v.data()).ok());
  EXPECT_EQ(counts_.reads, 2 * 2);
  EXPECT_TRUE(std::equal(k.begin(), k.end(), k_in.begin() + static_cast<std::ptrdiff_t>(5 * kv_dim_)));
  EXPECT_TRUE(std::equal(v.begin(), v.end(), v_in.begin() + static_cast<std::ptrdiff_t>(5 * kv_dim_)));
  // A converting export (f16 on the wire) still copies run by run; the values are the f16 of the cache's.
  counts_ = {};
  std::vector<uint16_t> k16(40 * kv_dim_), v16(40 * kv_dim_);
  ASSERT_TRUE(runner_->export_kv(seq, 0, 5, 40, DType::kF16, k16.data(), v16.data()).ok());
  EXPECT_EQ(counts_.reads, 2 * 2);
  std::vector<uint16_t> want(40 * kv_dim_);
  ASSERT_TRUE(quantize(std::span<const float>(k_in).subspan(5 * kv_dim_, 40 * kv_dim_), DType::kF16, want.data()).ok());
  EXPECT_EQ(k16, want);
}

TEST_F(KvCopyTest, ABlockOutsideTheCacheIsAnErrorNotACopy) {
  SequenceKv seq;
  seq.blocks = ids({3, 99});
  std::vector<float> k(2 * kBlockTokens * kv_dim_), v(k.size());
  counts_ = {};
  Status s = runner_->export_kv(seq, 0, 0, 2 * kBlockTokens, DType::kF32, k.data(), v.data());
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_EQ(counts_.reads, 0);
  seq.blocks = ids({3});
  EXPECT_EQ(runner_->export_kv(seq, 0, 0, kBlockTokens + 1, DType::kF32, k.data(), v.data()).code(),
            StatusCode::kOutOfRange);
}

// Every backend that opens here (ref, cpu, opencl on PoCL, vulkan on lavapipe; cuda where a GPU is) copies exactly the
// runs it is given, both ways, and refuses a run past either end before copying anything.
TEST(CopyRuns, EveryBackendCopiesTheRunsItIsGiven) {
  int tried = 0;
  for (const char* name : {"ref", "cpu", "opencl", "vulkan", "cuda"}) {
    auto device = ops::open_device(name);
    if (!device.ok()) continue;  // not built or no device here
    ++tried;
    SCOPED_TRACE(name);
    auto buffer = (*device)->alloc(4096);
    ASSERT_TRUE(buffer.ok());
    auto stream = (*device)->create_stream();
    std::vector<std::byte> zeros(4096), host(1024);
    for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<std::byte>(i * 7 + 1);
    ASSERT_TRUE(stream->write(**buffer, 0, zeros.data(), zeros.size()).ok());
    auto staging = (*device)->register_staging(host);
    ASSERT_TRUE(staging.ok());
    const std::vector<ops::CopyRun> runs = {{100, 0, 300}, {1000, 300, 12}, {4000, 312, 96}};
    ASSERT_TRUE(stream->copy_runs(**buffer, **staging, runs, ops::CopyDirection::kToDevice).ok());
    std::vector<std::byte> device_bytes(4096);
    ASSERT_TRUE(stream->read(**buffer, 0, device_bytes.data(), device_bytes.size()).ok());
    for (const ops::CopyRun& r : runs) {
      EXPECT_EQ(std::memcmp(device_bytes.data() + r.device_offset, host.data() + r.host_offset, r.bytes), 0);
    }
    EXPECT_EQ(device_bytes[99], std::byte{0});
    EXPECT_EQ(device_bytes[400], std::byte{0});
    std::vector<std::byte> back(1024);
    auto back_staging = (*device)->register_staging(back);
    ASSERT_TRUE(back_staging.ok());
    ASSERT_TRUE(stream->copy_runs(**buffer, **back_staging, runs, ops::CopyDirection::kToHost).ok());
    EXPECT_EQ(std::memcmp(back.data(), host.data(), 408), 0);
    const std::vector<ops::CopyRun> past = {{0, 0, 8}, {4090, 8, 16}};
    EXPECT_EQ(stream->copy_runs(**buffer, **back_staging, past, ops::CopyDirection::kToHost).code(),
              StatusCode::kOutOfRange);
    const std::vector<ops::CopyRun> past_host = {{0, 1020, 8}};
    EXPECT_EQ(stream->copy_runs(**buffer, **staging, past_host, ops::CopyDirection::kToDevice).code(),
              StatusCode::kOutOfRange);
  }
  EXPECT_GE(tried, 2);  // ref and cpu are always built
}

}  // namespace
}  // namespace tessera::engine
