// KV cache types (llama.cpp's -ctk / -ctv): attention over a bf16, q8_0 or q4_0 cache against the same attention over
// an f32 cache holding the same K and V, on ref and on every cpu kernel variant this processor runs. Both caches are
// filled by kv_write from the same f32 rows (so the quantising write is exercised too), then decode (three sequences
// of unlike lengths, grouped-query heads) and prefill (37 tokens after 150 cached, with a sliding window, soft-capping
// and sinks in turn) run on both. The normalised error sum((x - f32)^2) / sum(f32^2) must stay under the type's bound.
//
// Bounds (inputs uniform in [-1, 1), so a row's mean square is 1/3): a block's step is amax / 127 for q8_0 and
// amax / 8 for q4_0 (amax ~ 1), a rounding error's variance step^2 / 12, i.e. 5e-6 and 1.3e-3 per element, 1.6e-5
// and 3.9e-3 of the signal; bf16 keeps 8 mantissa bits (relative error up to 2^-9). Attention passes K's error through
// the softmax and V's straight to the output, so the output's normalised error is of the order of the elements':
// the bounds are ten times that (1e-4 for q8_0, 4e-2 for q4_0, 1e-5 for bf16). Controls: each type's error is above
// zero (the cache really holds the type), q4_0's is above q8_0's bound (a check this loose would pass anything), and a
// q8_0 cache whose blocks' scales are all doubled (a wrong dequantisation) fails the q8_0 bound.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "base/quant.h"
#include "base/rng.h"
#include "ops/backend.h"
#include "ops/cpu/cpu_backend.h"
#include "ops/registry.h"

namespace tessera::ops {
namespace {

constexpr int64_t kBlockTokens = 16, kKvHeads = 2, kHeads = 4, kBlocks = 16;  // 256 positions

double bound(DType t) {
  switch (t) {
    case DType::kBF16:
      return 1e-5;
    case DType::kQ8_0:
      return 1e-4;
    default:
      return 4e-2;  // q4_0
  }
}

double nmse(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    den += static_cast<double>(want[i]) * want[i];
  }
  return num / den;
}

// One device, one head_dim: f32 rows of K, V and queries, and attention over a cache of any type filled from them.
class Bench {
 public:
  Bench(Device& device, int64_t head_dim) : device_(device), hd_(head_dim), stream_(device.create_stream()) {
    Rng rng(42 + static_cast<uint64_t>(head_dim));
    auto fill = [&](std::vector<float>& v, size_t n, float scale) {
      v.resize(n);
      for (float& x : v) x = (rng.next_f32() * 2.0f - 1.0f) * scale;
    };
    const size_t rows = static_cast<size_t>(kBlocks * kBlockTokens * kKvHeads * hd_);
    fill(k_, rows, 1.0f);
    fill(v_, rows, 1.0f);
    fill(q_, static_cast<size_t>(64 * kHeads * hd_), 2.0f);
    fill(sinks_, kHeads, 3.0f);
  }

  // A cache of `type` holding every position's K and V (written by kv_write); `tamper` edits its bytes afterwards.
  void fill_cache(DType type, void (*tamper)(std::vector<uint8_t>&) = nullptr) {
    const int64_t positions = kBlocks * kBlockTokens;
    kc_ = make(type, {kBlocks, kBlockTokens, kKvHeads, hd_}, nullptr);
    vc_ = make(type, {kBlocks, kBlockTokens, kKvHeads, hd_}, nullptr);
    std::vector<int32_t> slots(static_cast<size_t>(positions));
    std::iota(slots.begin(), slots.end(), 0);
    Tensor k = make(DType::kF32, {positions, kKvHeads, hd_}, k_.data());
    Tensor v = make(DType::kF32, {positions, kKvHeads, hd_}, v_.data());
    Tensor s = make(DType::kI32, {positions}, slots.data());
    ASSERT_TRUE(stream_->run(KvWriteOp{k, v, kc_, vc_, s}).ok());
    if (tamper) {
      for (Tensor* t : {&kc_, &vc_}) {
        std::vector<uint8_t> bytes(t->bytes());
        ASSERT_TRUE(stream_->download(*t, bytes.data()).ok());
        tamper(bytes);
        ASSERT_TRUE(stream_->upload(*t, bytes.data()).ok());
      }
    }
  }

  // Three sequences of 256, 100 and 7 positions over shuffled blocks (the first takes every block).
  std::vector<float> decode(const AttentionScores& scores, bool sinks) {
    const int64_t b = 3;
    std::vector<int32_t> tables(static_cast<size_t>(b * kBlocks)), lens = {256, 100, 7};
    for (int64_t i = 0; i < b * kBlocks; ++i)
      tables[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7 + 3) % kBlocks);
    AttentionDecodeOp op{make(DType::kF32, {b, kHeads, hd_}, q_.data()),
                         kc_,
                         vc_,
                         make(DType::kI32, {b, kBlocks}, tables.data()),
                         make(DType::kI32, {b}, lens.data()),
                         make(DType::kF32, {b, kHeads, hd_}, nullptr)};
    op.scores = scores;
    if (sinks) op.sinks = make(DType::kF32, {kHeads}, sinks_.data());
    return run(op, op.out);
  }

  // 37 tokens at positions 150 .. 186.
  std::vector<float> prefill(const AttentionScores& scores, bool sinks) {
    const int64_t n = 37;
    std::vector<int32_t> table(kBlocks);
    for (int64_t i = 0; i < kBlocks; ++i) table[static_cast<size_t>(i)] = static_cast<int32_t>((i * 5 + 1) % kBlocks);
    AttentionPrefillOp op{
        make(DType::kF32, {n, kHeads, hd_}, q_.data()), kc_, vc_, make(DType::kI32, {kBlocks}, table.data()),
        make(DType::kF32, {n, kHeads, hd_}, nullptr),   150};
    op.scores = scores;
    if (sinks) op.sinks = make(DType::kF32, {kHeads}, sinks_.data());
    return run(op, op.out);
  }

 private:
  Tensor make(DType dtype, std::initializer_list<int64_t> shape, const void* data) {
    Tensor t(nullptr, 0, dtype, shape);
    auto b = device_.alloc(t.bytes());
    EXPECT_TRUE(b.ok());
    t.buffer = b->get();
    buffers_.push_back(std::move(b).value());
    if (data) {
      EXPECT_TRUE(stream_->upload(t, data).ok());
    }
    return t;
  }
  std::vector<float> run(const Op& op, const Tensor& out) {
    Status s = stream_->run(op);
    EXPECT_TRUE(s.ok()) << s.to_string();
    std::vector<float> got(static_cast<size_t>(out.numel()));
    EXPECT_TRUE(stream_->download(out, got.data()).ok());
    return got;
  }

  Device& device_;
  int64_t hd_;
  std::unique_ptr<Stream> stream_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  std::vector<float> k_, v_, q_, sinks_;
  Tensor kc_, vc_;
};

struct Variant {
  std::string name;
  AttentionScores scores;
  bool sinks = false;
};
const Variant kVariants[] = {{"plain", {}},
                             {"window 40", {0.0f, 0.0f, 40}},
                             {"scale+softcap", {0.0625f, 5.0f, 0}},
                             {"sinks+window 7", {0.0f, 0.0f, 7}, true}};

// Every variant's decode and prefill error of `type` against f32 on one device.
std::vector<std::pair<std::string, double>> errors(Device& device, int64_t hd, DType type,
                                                   void (*tamper)(std::vector<uint8_t>&) = nullptr) {
  Bench b(device, hd);
  std::vector<std::vector<float>> want;
  b.fill_cache(DType::kF32);
  for (const Variant& v : kVariants) {
    want.push_back(b.decode(v.scores, v.sinks));
    want.push_back(b.prefill(v.scores, v.sinks));
  }
  b.fill_cache(type, tamper);
  std::vector<std::pair<std::string, double>> out;
  size_t i = 0;
  for (const Variant& v : kVariants) {
    out.emplace_back("decode " + v.name, nmse(b.decode(v.scores, v.sinks), want[i++]));
    out.emplace_back("prefill " + v.name, nmse(b.prefill(v.scores, v.sinks), want[i++]));
  }
  return out;
}

struct Target {
  std::string name;
  std::unique_ptr<Backend> backend;  // owns the cpu variant the device runs (null for ref)
  std::unique_ptr<Device> device;
};

// ref and every cpu kernel variant this processor runs (avx512, avx2, generic).
std::vector<Target> devices() {
  std::vector<Target> out;
  out.push_back({"ref", nullptr, std::move(open_device("ref").value())});
  for (cpu::Isa isa : cpu::runnable_isas()) {
    auto backend = cpu::create_backend(isa);
    EXPECT_TRUE(backend.ok());
    if (!backend.ok()) continue;
    auto d = (*backend)->open_device_with(0, DeviceOptions{2, ""});
    EXPECT_TRUE(d.ok());
    if (!d.ok()) continue;
    out.push_back({"cpu " + std::string(cpu::isa_name(isa)), std::move(backend).value(), std::move(d).value()});
  }
  return out;
}

TEST(KvCacheTypes, AttentionOverAQuantisedCacheStaysWithinItsBoundOfF32) {
  for (Target& t : devices()) {
    const std::string& name = t.name;
    for (int64_t hd : {64, 128}) {
      double q8_worst = 0, q4_best = INFINITY;
      for (DType type : {DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
        for (const auto& [what, e] : errors(*t.device, hd, type)) {
          SCOPED_TRACE(name + " head_dim " + std::to_string(hd) + " " + std::string(dtype_name(type)) + " " + what);
          EXPECT_GT(e, 0.0) << "the cache does not hold the type: its result is f32's exactly";
          EXPECT_LT(e, bound(type));
          if (type == DType::kQ8_0) q8_worst = std::max(q8_worst, e);
          if (type == DType::kQ4_0) q4_best = std::min(q4_best, e);
        }
      }
      std::printf("%s head_dim %lld: q8_0 worst nmse %.3g (bound %g), q4_0 best %.3g (bound %g)\n", name.c_str(),
                  static_cast<long long>(hd), q8_worst, bound(DType::kQ8_0), q4_best, bound(DType::kQ4_0));
      EXPECT_GT(q4_best, bound(DType::kQ8_0)) << "q4_0's error should not fit q8_0's bound";
    }
  }
}

TEST(KvCacheTypes, AWrongScaleFailsTheBound) {
  // Every block's f16 scale doubled (one more to the exponent): what misreading the scale would compute.
  auto double_scales = [](std::vector<uint8_t>& bytes) {
    for (size_t at = 0; at + sizeof(BlockQ8_0) <= bytes.size(); at += sizeof(BlockQ8_0)) {
      uint16_t d;
      std::memcpy(&d, bytes.data() + at, 2);
      d = f32_to_f16(2.0f * f16_to_f32(d));
      std::memcpy(bytes.data() + at, &d, 2);
    }
  };
  for (Target& t : devices()) {
    for (const auto& [what, e] : errors(*t.device, 64, DType::kQ8_0, double_scales)) {
      SCOPED_TRACE(t.name + " " + what);
      EXPECT_GT(e, bound(DType::kQ8_0));
    }
  }
}

TEST(KvCacheTypes, ABlockTypeNeedsHeadDimAMultipleOf32) {
  auto device = std::move(open_device("ref").value());
  auto buf = device->alloc(1 << 16).value();
  Tensor cache(buf.get(), 0, DType::kQ8_0, {4, 16, 2, 32});
  cache.dims[3] = 48;  // 48 is not a whole number of blocks
  Tensor q(buf.get(), 0, DType::kF32, {1, 2, 48}), table(buf.get(), 0, DType::kI32, {1, 1});
  Tensor lens(buf.get(), 0, DType::kI32, {1});
  Status s = validate(AttentionDecodeOp{q, cache, cache, table, lens, q});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("q8_0 KV cache needs head_dim a multiple of 32"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace tessera::ops
