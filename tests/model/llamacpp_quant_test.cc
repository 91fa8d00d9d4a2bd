// GGUF files quantised by llama.cpp's own `llama-quantize`, read by Tessera: the check that Tessera's block
// layouts are llama.cpp's, independent of Tessera's own quantisers. A seeded f32 model (rows of 256 and 512,
// so every K-quant applies) is written by Tessera, quantised by llama-quantize with each common preset, then
// loaded back: every tensor dequantised by base/quant.h must be close to the f32 original (a wrong bit or
// nibble order gives errors of the signal's own size, not the few percent quantisation costs), each preset
// must produce the types it is known for (Q4_K_M: q4_k and q6_k; Q4_0: q4_0 with the output in q6_k), and
// the quantised model must run on the cpu backend with logits close to the ref backend's.
//
// llama-quantize comes from scripts/llamacpp.sh's cache (TESSERA_LLAMA_QUANTIZE overrides the path); where it
// is absent the test skips and says so.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>

#include "base/quant.h"
#include "engine/model_runner.h"
#include "model/formats/gguf/gguf_model.h"
#include "model/synth.h"
#include "ops/registry.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera::model {
namespace {

std::string llama_quantize() {
  if (const char* p = std::getenv("TESSERA_LLAMA_QUANTIZE")) return p;
  for (const char* p : {"/root/.cache/tessera/llama.cpp/3.21.1/build/bin/llama-quantize",
                        "/root/.cache/tessera/llama.cpp/build/bin/llama-quantize"}) {
    if (std::filesystem::exists(p)) return p;
  }
  return "";
}

ModelConfig shape() {
  ModelConfig c = *synth_shape("tiny");
  c.n_layers = 2;
  c.dim = 256;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 64;
  c.hidden_dim = 512;
  c.vocab_size = 512;
  c.max_seq_len = 64;
  c.tied_embeddings = false;
  return c;
}

// Normalised squared error a tensor of this type may have against its f32 original. llama-quantize's
// encodings of these weights measured (2026-12-01, largest over the tensors): q2_k 0.088, q3_k 0.023,
// q4_0 0.0075, q4_1 0.0062, q4_k 0.0051, q5_0 0.0018, q5_1 0.0014, q5_k 0.0013, q6_k 0.00032, q8_0 2.9e-5;
// the bounds leave 2-3x. A misread layout lands near 1 or above.
double bound(DType t) {
  switch (t) {
    case DType::kQ2_K:
      return 0.2;
    case DType::kQ3_K:
      return 0.06;
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ4_K:
      return 0.018;
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ5_K:
      return 0.005;
    case DType::kQ6_K:
      return 0.0008;
    case DType::kQ8_0:
      return 8e-5;
    default:
      return 1e-6;
  }
}

std::vector<float> to_f32(const WeightTensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  EXPECT_TRUE(dequantize(t.data, t.dtype, out).ok()) << t.name;
  return out;
}

std::vector<float> logits(ops::Device& device, const GgufModel& m) {
  engine::RunnerOptions o;
  o.max_batch_tokens = 8;
  auto r = engine::ModelRunner::create(device, m.config, m.weights, o);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (!r.ok()) return {};
  engine::SequenceKv seq;
  std::vector<float> out;
  const std::vector<TokenId> prompt = {1, 300, 42, 7, 511};
  EXPECT_TRUE((*r)->prefill(seq, prompt, out).ok());
  return out;
}

TEST(LlamaCppQuantize, EveryPresetLoadsWithLlamaCppsBlockLayouts) {
  const std::string quantize = llama_quantize();
  if (quantize.empty()) GTEST_SKIP() << "llama-quantize not built (scripts/llamacpp.sh); set TESSERA_LLAMA_QUANTIZE";
  const std::string dir = testing::scratch_dir();
  const ModelConfig cfg = shape();
  SynthModel m = synthesize_weights(cfg, 21);
  auto tok = synthesize_tokenizer(cfg.vocab_size, 21);
  auto vocab = tok->to_vocab();
  ASSERT_TRUE(vocab.ok());
  const std::string f32_path = dir + "/f32.gguf";
  ASSERT_TRUE(write_gguf_model(f32_path, cfg, m.weights, &*vocab, {}).ok());
  auto original = load_gguf_model(f32_path);
  ASSERT_TRUE(original.ok()) << original.status().to_string();
  auto ref = ops::open_device("ref");
  auto cpu = ops::open_device("cpu", 0, ops::DeviceOptions{2, ""});
  ASSERT_TRUE(ref.ok() && cpu.ok());

  // Each preset and types its file must hold (llama-quantize's mixtures; token_embd / output may differ).
  const std::map<std::string, std::set<DType>> kPresets = {{"Q2_K", {DType::kQ2_K}},
                                                           {"Q3_K_M", {DType::kQ3_K}},
                                                           {"Q4_K_M", {DType::kQ4_K, DType::kQ6_K}},
                                                           {"Q5_K_M", {DType::kQ5_K}},
                                                           {"Q6_K", {DType::kQ6_K}},
                                                           {"Q8_0", {DType::kQ8_0}},
                                                           {"Q4_0", {DType::kQ4_0, DType::kQ6_K}},
                                                           {"Q4_1", {DType::kQ4_1}},
                                                           {"Q5_0", {DType::kQ5_0}},
                                                           {"Q5_1", {DType::kQ5_1}}};
  std::set<DType> seen_all;
  for (const auto& [preset, expected] : kPresets) {
    SCOPED_TRACE(preset);
    const std::string path = dir + "/" + preset + ".gguf";
    testing::ProcessResult q = testing::run_process({quantize, f32_path, path, preset}, 300);
    ASSERT_EQ(q.exit_code, 0) << q.err.substr(q.err.size() > 2000 ? q.err.size() - 2000 : 0);
    auto g = load_gguf_model(path);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    std::set<DType> seen;
    for (const WeightTensor& t : original->weights.tensors()) {
      const WeightTensor* r = g->weights.find(t.name);
      ASSERT_NE(r, nullptr) << t.name;
      ASSERT_EQ(r->shape, t.shape) << t.name;
      seen.insert(r->dtype);
      const std::vector<float> want = to_f32(t), got = to_f32(*r);
      double err = 0, sig = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        err += (want[i] - got[i]) * (want[i] - got[i]);
        sig += want[i] * want[i];
      }
      EXPECT_LT(err / sig, bound(r->dtype)) << t.name << " as " << dtype_name(r->dtype);
    }
    for (DType d : expected) EXPECT_TRUE(seen.count(d)) << preset << " holds no " << dtype_name(d) << " tensor";
    seen_all.insert(seen.begin(), seen.end());
    if (preset == "Q4_0") {
      EXPECT_EQ(g->weights.find("output.weight")->dtype, DType::kQ6_K);
    }

    // The cpu kernels (the fast path for q8_0, q4_0 and the K-quants; widened to f32 otherwise) against ref.
    const std::vector<float> a = logits(**ref, *g), b = logits(**cpu, *g);
    ASSERT_EQ(a.size(), b.size());
    double err = 0, sig = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      err += (a[i] - b[i]) * (a[i] - b[i]);
      sig += a[i] * a[i];
    }
    EXPECT_LT(err / sig, 1e-3) << "cpu logits against ref";
  }
  for (DType d : {DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ4_1, DType::kQ5_0,
                  DType::kQ5_1, DType::kQ8_0, DType::kQ4_0}) {
    EXPECT_TRUE(seen_all.count(d)) << dtype_name(d);
  }
}

}  // namespace
}  // namespace tessera::model
