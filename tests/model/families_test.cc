// Every architecture family (model/model_config.h) at test size: the same synthetic model written as GGUF
// and as a Hugging Face folder loads to the same config and gives identical greedy continuations and
// bit-identical logits in Tessera (ref and cpu backends), equal to the in-memory model's; the files carry
// the metadata and tensor names llama.cpp's converter writes; rope scaling is applied (never ignored) and
// anything Tessera does not compute is refused with a message naming it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "base/mapped_file.h"
#include "engine/model_runner.h"
#include "model/formats/gguf/gguf_file.h"
#include "model/formats/safetensors/hf_model.h"
#include "model/formats/safetensors/safetensors_file.h"
#include "model/loader.h"
#include "model/model_writer.h"
#include "model/rope_scaling.h"
#include "model/synth.h"
#include "model/weight_export.h"
#include "ops/registry.h"
#include "support/paths.h"

namespace tessera::model {
namespace {

struct GreedyRun {
  std::vector<float> prompt_logits;
  std::vector<TokenId> greedy;
};

// Prefill `prompt`, then 24 greedy tokens one decode step at a time.
GreedyRun greedy(const std::string& backend, const ModelConfig& cfg, const ModelWeights& w,
                 const std::vector<TokenId>& prompt) {
  GreedyRun out;
  auto device = ops::open_device(backend);
  EXPECT_TRUE(device.ok()) << device.status().to_string();
  if (!device.ok()) return out;
  engine::RunnerOptions o;
  o.max_batch_tokens = 64;
  auto runner = engine::ModelRunner::create(**device, cfg, w, o);
  EXPECT_TRUE(runner.ok()) << runner.status().to_string();
  if (!runner.ok()) return out;
  engine::SequenceKv seq;
  std::vector<float> logits;
  EXPECT_TRUE((*runner)->prefill(seq, prompt, logits).ok());
  out.prompt_logits = logits;
  for (int i = 0; i < 24 && !logits.empty(); ++i) {
    TokenId next = static_cast<TokenId>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.greedy.push_back(next);
    engine::SequenceKv* s = &seq;
    Status st = (*runner)->decode(std::span(&s, 1), std::span(&next, 1), logits);
    EXPECT_TRUE(st.ok()) << st.to_string();
    if (!st.ok()) break;
  }
  return out;
}

const std::vector<TokenId> kPrompt = {1, 300, 17, 42, 99, 7, 250, 3, 480, 12, 64, 201, 33, 5};

class Families : public ::testing::TestWithParam<std::string> {};

TEST_P(Families, GgufAndHfFolderGiveIdenticalGreedyText) {
  const std::string shape = GetParam();
  auto cfg = synth_shape_small(shape);
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  cfg->n_layers = 3;
  SynthModel m = synthesize_weights(*cfg, 21);
  const std::string dir = testing::scratch_dir();
  GreedyRun direct = greedy("ref", *cfg, m.weights, kPrompt);
  ASSERT_EQ(direct.greedy.size(), 24u);
  for (std::optional<DType> d : {std::optional<DType>(), std::optional<DType>(DType::kF16)}) {
    const std::string tag = d ? "f16" : "f32";
    ModelWriteOptions o;
    o.dtype = d;
    ASSERT_TRUE(write_model("gguf", dir + "/" + tag + ".gguf", *cfg, m.weights, o).ok()) << shape;
    Status hs = write_model("safetensors", dir + "/" + tag, *cfg, m.weights, o);
    ASSERT_TRUE(hs.ok()) << hs.to_string();
    {  // The folder holds transformers' names, the top-level tensors included, not GGUF's.
      auto f = MappedFile::open(dir + "/" + tag + "/model.safetensors");
      ASSERT_TRUE(f.ok()) << f.status().to_string();
      auto st = parse_safetensors((*f)->bytes(), "model.safetensors");
      ASSERT_TRUE(st.ok()) << st.status().to_string();
      for (const SafetensorsTensor& t : st->tensors) {
        EXPECT_FALSE(t.name.starts_with("blk.") || t.name.starts_with("token_embd") || t.name.starts_with("output"))
            << shape << ": " << t.name;
      }
      EXPECT_TRUE(std::any_of(st->tensors.begin(), st->tensors.end(), [](const SafetensorsTensor& t) {
        return t.name == "model.embed_tokens.weight";
      })) << shape;
    }
    auto g = load_model(dir + "/" + tag + ".gguf", "", false);
    auto h = load_model(dir + "/" + tag, "", false);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    EXPECT_EQ(g->config.arch, cfg->arch);
    EXPECT_EQ(h->config.arch, cfg->arch);
    for (const LoadedModel* l : {&*g, &*h}) {
      const ModelConfig& c = l->config;
      EXPECT_EQ(c.qk_norm, cfg->qk_norm) << l->format;
      EXPECT_EQ(c.post_norms, cfg->post_norms) << l->format;
      EXPECT_EQ(c.gelu_mlp, cfg->gelu_mlp) << l->format;
      EXPECT_EQ(c.embedding_scale, cfg->embedding_scale) << l->format;
      EXPECT_EQ(c.attn_scale, cfg->attn_scale) << l->format;
      EXPECT_EQ(c.attn_softcap, cfg->attn_softcap) << l->format;
      EXPECT_EQ(c.final_softcap, cfg->final_softcap) << l->format;
      EXPECT_EQ(c.sliding_window, cfg->sliding_window) << l->format;
      EXPECT_EQ(c.sliding_pattern, cfg->sliding_pattern) << l->format;
      EXPECT_EQ(c.rope_theta_sliding, cfg->rope_theta_sliding) << l->format;
      EXPECT_EQ(c.rope_layout, cfg->rope_layout) << l->format;
      EXPECT_EQ(c.layer_kinds, cfg->layer_kinds) << l->format;
      EXPECT_EQ(c.moe.n_experts, cfg->moe.n_experts) << l->format;
      EXPECT_EQ(c.moe.n_experts_used, cfg->moe.n_experts_used) << l->format;
      EXPECT_EQ(c.moe.expert_hidden_dim, cfg->moe.expert_hidden_dim) << l->format;
      EXPECT_EQ(c.moe.normalize_weights, cfg->moe.normalize_weights) << l->format;
      EXPECT_EQ(c.moe.gating, cfg->moe.gating) << l->format;
      EXPECT_EQ(c.moe.swiglu_limit, cfg->moe.swiglu_limit) << l->format;
      EXPECT_EQ(c.attn_sinks, cfg->attn_sinks) << l->format;
      if (cfg->rope_scaling.type == RopeScalingType::kYarn) {  // (llama3's factors travel as rope_freqs.weight)
        EXPECT_EQ(c.rope_scaling.type, cfg->rope_scaling.type) << l->format;
        EXPECT_FLOAT_EQ(c.rope_scaling.mscale, cfg->rope_scaling.mscale) << l->format;
      }
    }
    GreedyRun a = greedy("ref", g->config, g->weights, kPrompt);
    GreedyRun b = greedy("ref", h->config, h->weights, kPrompt);
    EXPECT_EQ(a.greedy, b.greedy) << shape << " " << tag;
    EXPECT_EQ(a.prompt_logits, b.prompt_logits) << shape << " " << tag;
    if (!d) {
      EXPECT_EQ(a.prompt_logits, direct.prompt_logits) << shape << ": the GGUF file changed the model";
      EXPECT_EQ(a.greedy, direct.greedy) << shape;
    }
    // The fast backend computes the same model (within the conformance bounds: the same greedy tokens).
    GreedyRun c = greedy("cpu", g->config, g->weights, kPrompt);
    EXPECT_EQ(c.greedy, a.greedy) << shape << " " << tag << " on cpu";
  }
}

INSTANTIATE_TEST_SUITE_P(AllShapes, Families,
                         ::testing::Values("llama2-7b", "llama3.2-1b", "mistral-7b", "smollm2-135m", "qwen3-0.6b",
                                           "gemma2-2b", "gemma3-1b", "phi3-mini", "phi3-mini-128k", "qwen3-30b-a3b",
                                           "mixtral-8x7b", "gpt-oss-20b"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

// What llama.cpp's converter writes, per family: keys and tensor names a llama.cpp build reads.
TEST(FamilyGguf, MetadataAndTensorNamesAsLlamaCppWritesThem) {
  const std::string dir = testing::scratch_dir();
  auto write = [&](const std::string& shape) {
    ModelConfig c = *synth_shape_small(shape);
    c.n_layers = 2;
    SynthModel m = synthesize_weights(c, 3);
    const std::string path = dir + "/" + shape + ".gguf";
    EXPECT_TRUE(write_model("gguf", path, c, m.weights, {}).ok());
    auto bytes = read_file(path);
    EXPECT_TRUE(bytes.ok());
    auto parsed = parse_gguf({reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size()}, path);
    EXPECT_TRUE(parsed.ok()) << parsed.status().to_string();
    return std::make_pair(std::move(*bytes), std::move(*parsed));
  };
  auto has_tensor = [](const GgufContents& c, const std::string& n) {
    for (const GgufTensor& t : c.tensors)
      if (t.name == n) return true;
    return false;
  };
  {
    auto [bytes, c] = write("gemma2-2b");
    EXPECT_EQ(*c.get_string("general.architecture"), "gemma2");
    EXPECT_DOUBLE_EQ(*c.get_float("gemma2.attn_logit_softcapping"), 50.0);
    EXPECT_DOUBLE_EQ(*c.get_float("gemma2.final_logit_softcapping"), 30.0);
    EXPECT_EQ(*c.get_int("gemma2.attention.sliding_window"), 8);
    EXPECT_EQ(*c.get_int("gemma2.attention.key_length"), 32);
    EXPECT_TRUE(has_tensor(c, "blk.1.post_attention_norm.weight"));
    EXPECT_TRUE(has_tensor(c, "blk.1.post_ffw_norm.weight"));
    EXPECT_FALSE(has_tensor(c, "output.weight"));
  }
  {
    auto [bytes, c] = write("gemma3-1b");
    EXPECT_EQ(*c.get_int("gemma3.attention.sliding_window"), 8);
    EXPECT_TRUE(has_tensor(c, "blk.0.attn_q_norm.weight"));
    EXPECT_EQ(c.find("gemma3.attn_logit_softcapping"), nullptr);
  }
  {
    auto [bytes, c] = write("phi3-mini-128k");
    EXPECT_TRUE(has_tensor(c, "blk.0.attn_qkv.weight"));
    EXPECT_FALSE(has_tensor(c, "blk.0.attn_q.weight"));
    EXPECT_FALSE(has_tensor(c, "blk.0.ffn_gate.weight"));
    EXPECT_TRUE(has_tensor(c, "rope_factors_long.weight"));
    EXPECT_TRUE(has_tensor(c, "rope_factors_short.weight"));
    EXPECT_EQ(*c.get_int("phi3.rope.scaling.original_context_length"), 64);
    EXPECT_TRUE(c.find("phi3.rope.scaling.attn_factor") != nullptr);
    for (const GgufTensor& t : c.tensors) {
      if (t.name == "blk.0.ffn_up.weight") {
        EXPECT_EQ(t.ne[1], 2 * 128);  // [gate; up]
      }
    }
  }
  {
    auto [bytes, c] = write("llama3.2-1b");
    EXPECT_TRUE(has_tensor(c, "rope_freqs.weight"));
    EXPECT_EQ(c.find("llama.rope.scaling.type"), nullptr);
  }
  {
    auto [bytes, c] = write("qwen3-0.6b");
    EXPECT_EQ(*c.get_string("general.architecture"), "qwen3");
    EXPECT_TRUE(has_tensor(c, "blk.1.attn_k_norm.weight"));
  }
}

// Llama 3.1's rope_freqs.weight changes the logits (it used to be ignored), and the HF folder with its
// llama3 rope_scaling gives exactly the same ones.
TEST(RopeScaling, Llama3FactorsAreAppliedFromGgufAndHf) {
  ModelConfig c = *synth_shape_small("llama3.2-1b");
  c.n_layers = 2;
  SynthModel m = synthesize_weights(c, 9);
  std::vector<TokenId> prompt;
  for (int i = 0; i < 60; ++i) prompt.push_back(static_cast<TokenId>((i * 37 + 5) % 512));
  ModelConfig plain = c;
  plain.rope_scaling = {};
  GreedyRun scaled = greedy("ref", c, m.weights, prompt);
  GreedyRun unscaled = greedy("ref", plain, m.weights, prompt);
  EXPECT_NE(scaled.prompt_logits, unscaled.prompt_logits);
  const std::string dir = testing::scratch_dir();
  ASSERT_TRUE(write_model("gguf", dir + "/m.gguf", c, m.weights, {}).ok());
  ASSERT_TRUE(write_model("safetensors", dir + "/hf", c, m.weights, {}).ok());
  auto g = load_model(dir + "/m.gguf", "", false);
  auto h = load_model(dir + "/hf", "", false);
  ASSERT_TRUE(g.ok() && h.ok());
  EXPECT_EQ(h->config.rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_EQ(greedy("ref", g->config, g->weights, prompt).prompt_logits, scaled.prompt_logits);
  EXPECT_EQ(greedy("ref", h->config, h->weights, prompt).prompt_logits, scaled.prompt_logits);
}

TEST(RopeScaling, Llama3FactorsByHand) {
  // head_dim 8, theta 10000: frequencies 1, .1, .01, .001 (wavelengths 6.28, 62.8, 628, 6283); original
  // context 1024, low 1, high 4 -> wavelengths under 256 keep factor 1, over 1024 get `factor` 8, and 628
  // is blended: smooth = (1024 / 628.3 - 1) / 3 = .20992, factor 1 / ((1 - smooth) / 8 + smooth) = 3.2396.
  ModelConfig c;
  c.head_dim = 8;
  c.rope_theta = 10000.0f;
  c.rope_scaling = {RopeScalingType::kLlama3, 8.0f, 1024, 1.0f, 4.0f};
  std::vector<float> f = llama3_freq_factors(c);
  ASSERT_EQ(f.size(), 4u);
  EXPECT_FLOAT_EQ(f[0], 1.0f);
  EXPECT_FLOAT_EQ(f[1], 1.0f);
  EXPECT_NEAR(f[2], 3.2396f, 1e-3f);
  EXPECT_FLOAT_EQ(f[3], 8.0f);
}

TEST(RopeScaling, LinearAndYarnTablesByHand) {
  ModelConfig c = *synth_shape("tiny");  // head_dim 8... no: 64 / 8 = 8
  c.head_dim = 64;
  c.n_heads = 1;
  c.n_kv_heads = 1;
  c.dim = 64;
  ModelWeights none;
  auto plain = rope_frequencies(c, none, 0, 512);
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->inv_freq.empty());  // no scaling: the unchanged path
  c.rope_scaling.type = RopeScalingType::kLinear;
  c.rope_scaling.factor = 4.0f;
  auto lin = rope_frequencies(c, none, 0, 512);
  ASSERT_TRUE(lin.ok());
  EXPECT_NEAR(lin->inv_freq[0], 0.25f, 1e-7f);
  EXPECT_NEAR(lin->inv_freq[16], std::pow(10000.0, -0.5) / 4, 1e-9);
  // YaRN over 4096 positions, beta 32 / 1: pairs turning 32 times are j <= floor(10.47) = 10, once
  // j >= ceil(22.51) = 23 (64 ln(4096 / (2 pi b)) / (2 ln 10000)); between them the ramp (j - 10) / 13.
  c.rope_scaling = {RopeScalingType::kYarn, 4.0f, 4096, 1.0f, 4.0f, 32.0f, 1.0f, 1.1386f};
  auto y = rope_frequencies(c, none, 0, 16384);
  ASSERT_TRUE(y.ok());
  auto base = [](int j) { return std::pow(10000.0, -2.0 * j / 64); };
  EXPECT_NEAR(y->inv_freq[0], base(0), 1e-7);
  EXPECT_NEAR(y->inv_freq[10], base(10), 1e-9);
  EXPECT_NEAR(y->inv_freq[23], base(23) / 4, 1e-9);
  EXPECT_NEAR(y->inv_freq[31], base(31) / 4, 1e-9);
  const double r = 6.0 / 13.0;
  EXPECT_NEAR(y->inv_freq[16], base(16) / 4 * r + base(16) * (1 - r), 1e-9);
  EXPECT_FLOAT_EQ(y->mscale, 1.1386f);
}

TEST(RopeScaling, LongropeChoosesItsSetByContextAndNeedsTheTensors) {
  ModelConfig c = *synth_shape_small("phi3-mini-128k");
  SynthModel m = synthesize_weights(c, 4);
  auto lf = tensor_to_f32(*m.weights.find("rope_factors_long.weight"));
  auto sf = tensor_to_f32(*m.weights.find("rope_factors_short.weight"));
  auto at_long = rope_frequencies(c, m.weights, 0, 512);  // 512 > original 64: the long factors
  auto at_short = rope_frequencies(c, m.weights, 0, 64);
  ASSERT_TRUE(at_long.ok() && at_short.ok());
  const double base5 = std::pow(static_cast<double>(c.rope_theta), -10.0 / c.head_dim);
  EXPECT_NEAR(at_long->inv_freq[5], base5 / (*lf)[5], 1e-8);  // f32 tables
  EXPECT_NEAR(at_short->inv_freq[5], base5 / (*sf)[5], 1e-8);
  EXPECT_GT(std::abs(at_long->inv_freq[5] - at_short->inv_freq[5]), 1e-3);
  EXPECT_EQ(at_long->mscale, c.rope_scaling.mscale);
  ModelWeights without;
  auto missing = rope_frequencies(c, without, 0, 512);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("rope_factors_long.weight"), std::string::npos);
}

std::string config_with(const std::string& extra) {
  return R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
             "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2, "vocab_size": 512,
             "max_position_embeddings": 1024)" +
         extra + "}";
}

TEST(RopeScaling, UnsupportedOrIncompleteConfigsAreRefusedByName) {
  auto dyn = parse_hf_config(config_with(R"(, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0})"), "c");
  ASSERT_FALSE(dyn.ok());
  EXPECT_EQ(dyn.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(dyn.status().message().find("'dynamic'"), std::string::npos) << dyn.status().message();
  auto l3 =
      parse_hf_config(config_with(R"(, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192})"),
                      "c");
  ASSERT_FALSE(l3.ok());
  EXPECT_NE(l3.status().message().find("low_freq_factor"), std::string::npos) << l3.status().message();
  auto ds = parse_hf_config(config_with(R"(, "rope_scaling": {"type": "yarn", "factor": 4.0, "mscale": 0.7,
                   "original_max_position_embeddings": 4096})"),
                            "c");
  ASSERT_FALSE(ds.ok());
  EXPECT_NE(ds.status().message().find("mscale"), std::string::npos);
  auto lin = parse_hf_config(config_with(R"(, "rope_scaling": {"type": "linear", "factor": 2.0})"), "c");
  ASSERT_TRUE(lin.ok()) << lin.status().to_string();
  EXPECT_EQ(lin->rope_scaling.type, RopeScalingType::kLinear);
  auto vision = parse_hf_config(R"({"architectures": ["Gemma3ForConditionalGeneration"]})", "c");
  ASSERT_FALSE(vision.ok());
  EXPECT_NE(vision.status().message().find("Gemma3ForCausalLM"), std::string::npos) << vision.status().message();
  auto act = parse_hf_config(R"({"architectures": ["Gemma2ForCausalLM"], "hidden_size": 64,
      "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2, "vocab_size": 512,
      "hidden_activation": "relu"})",
                             "c");
  ASSERT_FALSE(act.ok());
  EXPECT_NE(act.status().message().find("relu"), std::string::npos);
}

TEST(RopeScaling, GgufScalingTypeOutsideTheSupportedOnesIsRefused) {
  ModelConfig c = *synth_shape("tiny");
  c.n_layers = 1;
  c.rope_scaling.type = RopeScalingType::kLinear;
  c.rope_scaling.factor = 2.0f;
  SynthModel m = synthesize_weights(c, 2);
  const std::string dir = testing::scratch_dir();
  ASSERT_TRUE(write_model("gguf", dir + "/m.gguf", c, m.weights, {}).ok());
  auto ok = load_model(dir + "/m.gguf", "", false);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->config.rope_scaling.type, RopeScalingType::kLinear);
  EXPECT_EQ(ok->config.rope_scaling.factor, 2.0f);
  // Rewrite the type string in place ("linear" -> "lenear"): the reader names what it does not know.
  auto bytes = read_file(dir + "/m.gguf");
  ASSERT_TRUE(bytes.ok());
  std::string b = *bytes;
  size_t at = b.find("linear");
  ASSERT_NE(at, std::string::npos);
  b[at + 1] = 'e';
  std::ofstream(dir + "/bad.gguf", std::ios::binary) << b;
  auto bad = load_model(dir + "/bad.gguf", "", false);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'lenear'"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace tessera::model
