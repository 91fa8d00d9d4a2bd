// Decode attention gives a sequence the same bits whatever else is in the step and however many threads run it: the
// same query over the same cache, alone at one thread, alone at two, and second in a batch of four sequences of unlike
// lengths (shorter, longer, within a key block) at two, on every cpu kernel variant this processor runs, for heads of
// 64 (one per kv head), 128 and 256 (grouped), with f16, bf16, q8_0 and q4_0 caches, at lengths inside one range and
// over several.
// A serving node batches whichever requests are in flight, so without this a greedy reply changed with the load beside
// it (the chat replay of docs/benchmarks.md, "Chat users sharing a system prompt").
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "base/rng.h"
#include "ops/backend.h"
#include "ops/cpu/cpu_backend.h"
#include "ops/registry.h"

namespace tessera::ops {
namespace {

constexpr int64_t kBlockTokens = 16, kBlocks = 256;  // 4096 positions

struct Shape {
  int64_t heads, kv_heads, hd;
};

// Decode outputs of sequence `probe`'s query over one cache, in batches of the caller's choosing.
class Decoder {
 public:
  Decoder(Device& device, const Shape& s, DType type) : device_(device), s_(s), stream_(device.create_stream()) {
    Rng rng(7 + static_cast<uint64_t>(s.hd));
    const int64_t positions = kBlocks * kBlockTokens;
    std::vector<float> k(static_cast<size_t>(positions * s.kv_heads * s.hd)), v(k.size());
    for (float& x : k) x = rng.next_f32() * 2.0f - 1.0f;
    for (float& x : v) x = rng.next_f32() * 2.0f - 1.0f;
    q_.resize(static_cast<size_t>(4 * s.heads * s.hd));
    for (float& x : q_) x = (rng.next_f32() * 2.0f - 1.0f) * 2.0f;
    kc_ = make(type, {kBlocks, kBlockTokens, s.kv_heads, s.hd}, nullptr);
    vc_ = make(type, {kBlocks, kBlockTokens, s.kv_heads, s.hd}, nullptr);
    std::vector<int32_t> slots(static_cast<size_t>(positions));
    std::iota(slots.begin(), slots.end(), 0);
    EXPECT_TRUE(stream_
                    ->run(KvWriteOp{make(DType::kF32, {positions, s.kv_heads, s.hd}, k.data()),
                                    make(DType::kF32, {positions, s.kv_heads, s.hd}, v.data()), kc_, vc_,
                                    make(DType::kI32, {positions}, slots.data())})
                    .ok());
  }

  // The output rows of sequence `which` (lens[which] positions, query `which`) when `lens` decode together; every
  // sequence reads the blocks in a shuffled order of its own.
  // Row r of a prefill of n rows from `start`, whose query r is query 0.
  std::vector<float> prefill_row(int32_t start, int32_t n, int32_t r) {
    std::vector<int32_t> table(static_cast<size_t>(kBlocks));
    for (int64_t j = 0; j < kBlocks; ++j) table[static_cast<size_t>(j)] = static_cast<int32_t>((j * 37 + 5) % kBlocks);
    std::vector<float> q(static_cast<size_t>(n * s_.heads * s_.hd));
    for (int32_t i = 0; i < n; ++i)
      std::memcpy(q.data() + i * s_.heads * s_.hd, q_.data() + (i == r ? 0 : 1 + i % 3) * s_.heads * s_.hd,
                  static_cast<size_t>(s_.heads * s_.hd) * sizeof(float));
    AttentionPrefillOp op{make(DType::kF32, {n, s_.heads, s_.hd}, q.data()), kc_, vc_,
                          make(DType::kI32, {kBlocks}, table.data()), make(DType::kF32, {n, s_.heads, s_.hd}, nullptr)};
    op.start_pos = start;
    Status st = stream_->run(op);
    EXPECT_TRUE(st.ok()) << st.to_string();
    std::vector<float> all(static_cast<size_t>(op.out.numel()));
    EXPECT_TRUE(stream_->download(op.out, all.data()).ok());
    const auto row = static_cast<size_t>(s_.heads * s_.hd);
    return {all.begin() + static_cast<std::ptrdiff_t>(r * row),
            all.begin() + static_cast<std::ptrdiff_t>((r + 1) * row)};
  }
  std::vector<float> decode(const std::vector<int32_t>& lens, size_t which) {
    const auto b = static_cast<int64_t>(lens.size());
    std::vector<int32_t> tables(static_cast<size_t>(b * kBlocks));
    for (int64_t i = 0; i < b; ++i)
      for (int64_t j = 0; j < kBlocks; ++j)
        tables[static_cast<size_t>(i * kBlocks + j)] = static_cast<int32_t>((j * 37 + 11 * i + 5) % kBlocks);
    std::vector<float> q(static_cast<size_t>(b * s_.heads * s_.hd));
    for (int64_t i = 0; i < b; ++i)  // `which` gets query 0 wherever it sits; the others 1, 2, 3
      std::memcpy(q.data() + i * s_.heads * s_.hd,
                  q_.data() + (static_cast<size_t>(i) == which ? 0 : 1 + i % 3) * s_.heads * s_.hd,
                  static_cast<size_t>(s_.heads * s_.hd) * sizeof(float));
    // The probe's table is the same wherever it sits in the batch.
    for (int64_t j = 0; j < kBlocks; ++j)
      tables[which * kBlocks + static_cast<size_t>(j)] = static_cast<int32_t>((j * 37 + 5) % kBlocks);
    AttentionDecodeOp op{make(DType::kF32, {b, s_.heads, s_.hd}, q.data()),
                         kc_,
                         vc_,
                         make(DType::kI32, {b, kBlocks}, tables.data()),
                         make(DType::kI32, {b}, lens.data()),
                         make(DType::kF32, {b, s_.heads, s_.hd}, nullptr)};
    Status st = stream_->run(op);
    EXPECT_TRUE(st.ok()) << st.to_string();
    std::vector<float> all(static_cast<size_t>(op.out.numel()));
    EXPECT_TRUE(stream_->download(op.out, all.data()).ok());
    const auto row = static_cast<size_t>(s_.heads * s_.hd);
    return {all.begin() + static_cast<std::ptrdiff_t>(which * row),
            all.begin() + static_cast<std::ptrdiff_t>((which + 1) * row)};
  }

 private:
  Tensor make(DType dtype, std::initializer_list<int64_t> shape, const void* data) {
    Tensor t(nullptr, 0, dtype, shape);
    auto b = device_.alloc(t.bytes());
    EXPECT_TRUE(b.ok());
    t.buffer = b->get();
    buffers_.push_back(std::move(b).value());
    if (data) EXPECT_TRUE(stream_->upload(t, data).ok());
    return t;
  }

  Device& device_;
  Shape s_;
  std::unique_ptr<Stream> stream_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  std::vector<float> q_;
  Tensor kc_, vc_;
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(DecodeInvariance, ASequencesRowsDoNotDependOnItsBatchOrTheThreads) {
  int checked = 0;
  for (cpu::Isa isa : cpu::runnable_isas()) {
    auto backend = cpu::create_backend(isa);
    ASSERT_TRUE(backend.ok());
    auto one = (*backend)->open_device_with(0, DeviceOptions{1, ""});
    auto two = (*backend)->open_device_with(0, DeviceOptions{2, ""});
    ASSERT_TRUE(one.ok() && two.ok());
    for (const Shape& s : {Shape{4, 4, 64}, Shape{8, 2, 128}, Shape{8, 2, 256}}) {
      for (DType type : {DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
        Decoder d1(**one, s, type), d2(**two, s, type);
        for (int32_t len : {200, 300, 700, 1300, 3001}) {
          const std::string what = std::string(cpu::isa_name(isa)) + ", heads " + std::to_string(s.heads) + " on " +
                                   std::to_string(s.kv_heads) + " of " + std::to_string(s.hd) + ", " +
                                   std::string(dtype_name(type)) + ", " + std::to_string(len) + " positions";
          const std::vector<float> alone = d1.decode({len}, 0);
          EXPECT_TRUE(same_bits(d2.decode({len}, 0), alone)) << what << ": alone at two threads";
          EXPECT_TRUE(same_bits(d2.decode({90, len, 4000, 250}, 1), alone)) << what << ": in a batch of four";
          EXPECT_TRUE(same_bits(d1.decode({len, 3500}, 0), alone)) << what << ": beside a longer one, one thread";
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 0);
}

// A position decoded and the same position computed as a row of a prefill (a prompt that goes on past a cached
// reply reads K and V its decode wrote): the generic kernels give the same bits, the vector kernels sum the scores and
// the softmax in another order (key panels against one query's ranges) and agree within float rounding, about 1e-7
// here. That difference is what makes a reply after a prefix hit on a decoded block differ in its last bits from the
// same prompt computed whole (docs/benchmarks.md, "Replies after reuse are not the no-reuse run's bits").
TEST(DecodeInvariance, APrefillRowAgreesWithTheDecodeOfTheSamePosition) {
  struct Case {
    int32_t start, n, row;
  };
  for (cpu::Isa isa : cpu::runnable_isas()) {
    auto backend = cpu::create_backend(isa);
    ASSERT_TRUE(backend.ok());
    auto two = (*backend)->open_device_with(0, DeviceOptions{2, ""});
    ASSERT_TRUE(two.ok());
    for (const Shape& s : {Shape{8, 2, 256}, Shape{32, 8, 64}}) {
      Decoder d(**two, s, DType::kF16);
      for (const Case& c : {Case{0, 1100, 1060}, Case{1040, 112, 20}}) {
        const std::vector<float> decoded = d.decode({c.start + c.row + 1}, 0);
        const std::vector<float> prefilled = d.prefill_row(c.start, c.n, c.row);
        ASSERT_EQ(decoded.size(), prefilled.size());
        double gap = 0;
        for (size_t i = 0; i < decoded.size(); ++i)
          gap = std::max(gap, std::abs(static_cast<double>(decoded[i]) - prefilled[i]));
        const std::string what = std::string(cpu::isa_name(isa)) + ", heads of " + std::to_string(s.hd) +
                                 ", position " + std::to_string(c.start + c.row);
        if (isa == cpu::Isa::kGeneric) EXPECT_TRUE(same_bits(decoded, prefilled)) << what;
        EXPECT_LT(gap, 1e-6) << what;
      }
    }
  }
}

}  // namespace
}  // namespace tessera::ops
