// RunnerOptions::weight_dtype: f32 matrices converted at load, the rest left alone, and the model still
// computes the same function within the precision of the chosen type.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "base/quant.h"
#include "engine/model_runner.h"
#include "model/synth.h"
#include "ops/registry.h"

namespace tessera::engine {
namespace {

std::vector<float> logits_for(ops::Device& device, const model::SynthModel& m, std::optional<DType> dtype,
                              std::unique_ptr<ModelRunner>* keep = nullptr) {
  RunnerOptions o;
  o.max_batch_tokens = 8;
  o.weight_dtype = dtype;
  auto r = ModelRunner::create(device, m.config, m.weights, o);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  SequenceKv seq;
  std::vector<float> logits;
  std::vector<TokenId> prompt = {1, 300, 42, 7, 511};
  EXPECT_TRUE((*r)->prefill(seq, prompt, logits).ok());
  if (keep) *keep = std::move(r).value();
  return logits;
}

TEST(WeightDtype, ConvertsMatricesAndStaysCloseToF32) {
  auto d = ops::open_device("ref");
  ASSERT_TRUE(d.ok());
  auto c = model::synth_shape("tiny");
  c->n_layers = 2;
  c->max_seq_len = 32;
  model::SynthModel m = model::synthesize_weights(*c, 5);
  std::vector<float> want = logits_for(**d, m, std::nullopt);
  float scale = 0.0f;
  for (float v : want) scale = std::max(scale, std::fabs(v));
  // Relative to the largest logit: f16 keeps 11 bits, bf16 8, q8_0 ~7, q4_0 ~3.
  const std::pair<DType, float> cases[] = {
      {DType::kF16, 0.01f}, {DType::kBF16, 0.05f}, {DType::kQ8_0, 0.05f}, {DType::kQ4_0, 0.5f}};
  for (auto [dtype, tol] : cases) {
    std::unique_ptr<ModelRunner> runner;
    std::vector<float> got = logits_for(**d, m, dtype, &runner);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_GT(runner->converted_matrices(), 0) << dtype_name(dtype);
    float err = 0.0f;
    for (size_t i = 0; i < got.size(); ++i) err = std::max(err, std::fabs(got[i] - want[i]));
    EXPECT_LE(err, tol * scale) << dtype_name(dtype);
    EXPECT_GT(err, 0.0f) << dtype_name(dtype) << ": conversion had no effect";
  }
  std::unique_ptr<ModelRunner> f32_runner, q4_runner;
  logits_for(**d, m, std::nullopt, &f32_runner);
  logits_for(**d, m, DType::kQ4_0, &q4_runner);
  // q4_0 stores 4.5 bits a weight; ffn_down (172-wide rows) stays f32 in this shape, hence 3x not 7x.
  EXPECT_LT(q4_runner->weight_bytes_per_token() * 3, f32_runner->weight_bytes_per_token());
}

TEST(WeightDtype, RowsThatAreNotWholeBlocksStayF32) {
  auto d = ops::open_device("ref");
  auto c = model::synth_shape("tiny");
  c->n_layers = 1;
  c->max_seq_len = 16;
  c->hidden_dim = 40;  // ffn_down rows hold 40 values: not a whole number of 32-element blocks
  model::SynthModel m = model::synthesize_weights(*c, 5);
  RunnerOptions o;
  o.weight_dtype = DType::kQ8_0;
  o.max_batch_tokens = 4;
  auto r = ModelRunner::create(**d, m.config, m.weights, o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)->unconverted_matrices(), 1);
  o.weight_dtype = DType::kI32;
  EXPECT_EQ(ModelRunner::create(**d, m.config, m.weights, o).status().code(), StatusCode::kInvalidArgument);
}

// A tied embedding stored quantised: the lookup needs f32 rows (the embedding operator's table type), but
// the classifier, read in full every token, stays in the stored type. It computes what the f32 table the
// stored one dequantises to computes, within the activation quantisation of the integer kernels.
TEST(WeightDtype, TiedClassifierKeepsTheStoredType) {
  auto d = ops::open_device("cpu", 0, ops::DeviceOptions{1, ""});
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  auto c = model::synth_shape("tiny");
  c->n_layers = 1;
  c->max_seq_len = 16;
  ASSERT_TRUE(c->tied_embeddings);
  for (DType stored : {DType::kQ8_0, DType::kQ4_0, DType::kF16}) {
    model::SynthModel m = model::synthesize_weights(*c, 9);
    model::WeightTensor t = *m.weights.find("token_embd.weight");
    const auto n = static_cast<size_t>(t.numel());
    std::vector<float> f32(n);
    std::memcpy(f32.data(), t.data, n * 4);
    std::vector<uint8_t> packed(dtype_bytes(stored, n));
    ASSERT_TRUE(quantize(f32, stored, packed.data()).ok());
    std::vector<float> widened(n);  // what the stored table means, as f32
    ASSERT_TRUE(dequantize(packed.data(), stored, widened).ok());

    model::SynthModel wide = model::synthesize_weights(*c, 9);
    model::WeightTensor w = t;
    w.data = reinterpret_cast<const uint8_t*>(widened.data());
    wide.weights.replace(w);
    std::unique_ptr<ModelRunner> wide_runner;
    std::vector<float> want = logits_for(**d, wide, std::nullopt, &wide_runner);

    t.dtype = stored;
    t.data = packed.data();
    t.bytes = packed.size();
    m.weights.replace(t);
    std::unique_ptr<ModelRunner> runner;
    std::vector<float> got = logits_for(**d, m, std::nullopt, &runner);
    // The f32 run streams the f32 table; this one the stored bytes instead.
    EXPECT_EQ(runner->weight_bytes_per_token() + n * 4, wide_runner->weight_bytes_per_token() + packed.size())
        << dtype_name(stored);
    ASSERT_EQ(got.size(), want.size());
    float scale = 0.0f, err = 0.0f;
    for (size_t i = 0; i < got.size(); ++i) {
      scale = std::max(scale, std::fabs(want[i]));
      err = std::max(err, std::fabs(got[i] - want[i]));
    }
    EXPECT_LE(err, 0.02f * scale) << dtype_name(stored);
  }
}

// A quantised, tied embedding stays in its stored type on the cpu backend: the lookup widens one row at a
// time, the classifier shares the same table, and no f32 copy of it is held (Qwen2.5-0.5B Q4_K_M: 532 MB less
// resident memory). Every other weight is f32 here, so the resident bytes are exactly the stored ones.
TEST(WeightDtype, AQuantisedTiedEmbeddingIsHeldOnceInItsStoredType) {
  auto d = ops::open_device("cpu");
  ASSERT_TRUE(d.ok());
  auto c = model::synth_shape("tiny");
  c->n_layers = 2;
  c->max_seq_len = 32;
  c->tied_embeddings = true;
  model::SynthModel m = model::synthesize_weights(*c, 5);
  const model::WeightTensor* table = m.weights.find("token_embd.weight");
  ASSERT_NE(table, nullptr);
  std::vector<float> f32(static_cast<size_t>(table->numel()));
  std::memcpy(f32.data(), table->data, table->bytes);
  std::vector<uint8_t> q8(dtype_bytes(DType::kQ8_0, f32.size()));
  ASSERT_TRUE(quantize(f32, DType::kQ8_0, q8.data()).ok());
  model::WeightTensor t = *table;
  t.dtype = DType::kQ8_0;
  t.data = q8.data();
  t.bytes = q8.size();
  m.weights.replace(t);
  size_t stored = 0;
  for (const model::WeightTensor& w : m.weights.tensors()) stored += w.bytes;
  std::unique_ptr<ModelRunner> runner;
  std::vector<float> got = logits_for(**d, m, std::nullopt, &runner);
  EXPECT_EQ(runner->resident_weight_bytes(), stored) << "an f32 copy of the table, or a second classifier";
  // And it computes what the reference backend computes from the same q8_0 table.
  auto ref = ops::open_device("ref");
  ASSERT_TRUE(ref.ok());
  std::vector<float> want = logits_for(**ref, m, std::nullopt);
  ASSERT_EQ(got.size(), want.size());
  float scale = 0.0f, err = 0.0f;
  for (size_t i = 0; i < got.size(); ++i) {
    scale = std::max(scale, std::fabs(want[i]));
    err = std::max(err, std::fabs(got[i] - want[i]));
  }
  EXPECT_LE(err, 0.05f * scale);
}

}  // namespace
}  // namespace tessera::engine
