// Mixture-of-experts models in files and in the engine: the GGUF keys and 3-D tensors llama.cpp's converter writes
// (and its fused ffn_gate_up_exps), Hugging Face folders with one matrix per expert or stacked as transformers 5
// saves them, per-layer kinds (Qwen3-MoE's mlp_only_layers), what is refused by name, and the engine's promise that
// a row's result never depends on what shares its step (rows routed to different experts, chunked prefill,
// batched decode).
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "engine/model_runner.h"
#include "model/formats/gguf/gguf_file.h"
#include "model/formats/safetensors/safetensors_file.h"
#include "model/loader.h"
#include "model/model_writer.h"
#include "model/synth.h"
#include "ops/registry.h"
#include "support/paths.h"
#include "support/refusing_device.h"

namespace tessera::model {
namespace {

using Json = nlohmann::json;

const std::vector<TokenId> kPrompt = {1, 300, 17, 42, 99, 7, 250, 3, 480, 12, 64, 201, 33, 5};

// Prompt logits and 12 greedy tokens.
struct RunOut {
  std::vector<float> logits;
  std::vector<TokenId> greedy;
};
RunOut run(const std::string& backend, const ModelConfig& cfg, const ModelWeights& w) {
  RunOut out;
  auto device = ops::open_device(backend);
  EXPECT_TRUE(device.ok());
  if (!device.ok()) return out;
  auto runner = engine::ModelRunner::create(**device, cfg, w, {});
  EXPECT_TRUE(runner.ok()) << runner.status().to_string();
  if (!runner.ok()) return out;
  engine::SequenceKv seq;
  std::vector<float> logits;
  EXPECT_TRUE((*runner)->prefill(seq, kPrompt, logits).ok());
  out.logits = logits;
  for (int i = 0; i < 12; ++i) {
    TokenId next = static_cast<TokenId>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.greedy.push_back(next);
    engine::SequenceKv* s = &seq;
    if (!(*runner)->decode(std::span(&s, 1), std::span(&next, 1), logits).ok()) break;
  }
  return out;
}

SynthModel small(const std::string& shape, int layers = 2) {
  ModelConfig c = *synth_shape_small(shape);
  c.n_layers = layers;
  return synthesize_weights(c, 5);
}

GgufContents parse_file(const std::string& path, std::string& keep) {
  keep = *read_file(path);
  auto parsed = parse_gguf({reinterpret_cast<const uint8_t*>(keep.data()), keep.size()}, path);
  EXPECT_TRUE(parsed.ok()) << parsed.status().to_string();
  return std::move(*parsed);
}

const GgufTensor* tensor(const GgufContents& c, const std::string& n) {
  for (const GgufTensor& t : c.tensors)
    if (t.name == n) return &t;
  return nullptr;
}

// Rewrites a GGUF file with one more metadata key (or a changed one).
std::string with_key(const std::string& path, const std::string& key, GgufValue v) {
  std::string keep;
  GgufContents c = parse_file(path, keep);
  std::vector<std::pair<std::string, GgufValue>> kv;
  for (const std::string& k : c.keys)
    if (k != key) kv.emplace_back(k, c.metadata.at(k));
  kv.emplace_back(key, std::move(v));
  const std::string out = path + "." + key + ".gguf";
  EXPECT_TRUE(write_gguf(out, kv, c.tensors).ok());
  return out;
}

TEST(MoeGguf, KeysAndTensorsAsLlamaCppsConverterWritesThem) {
  const std::string dir = testing::scratch_dir();
  {
    SynthModel m = small("qwen3-30b-a3b");
    ModelWriteOptions o;
    o.dtype = DType::kF16;
    ASSERT_TRUE(write_model("gguf", dir + "/q.gguf", m.config, m.weights, o).ok());
    std::string keep;
    GgufContents c = parse_file(dir + "/q.gguf", keep);
    EXPECT_EQ(*c.get_string("general.architecture"), "qwen3moe");
    EXPECT_EQ(*c.get_int("qwen3moe.expert_count"), 8);
    EXPECT_EQ(*c.get_int("qwen3moe.expert_used_count"), 2);
    EXPECT_EQ(*c.get_int("qwen3moe.expert_feed_forward_length"), 128);
    EXPECT_EQ(c.find("qwen3moe.expert_weights_norm"), nullptr);  // llama.cpp's qwen3moe always renormalises
    const GgufTensor* gate = tensor(c, "blk.1.ffn_gate_exps.weight");
    const GgufTensor* down = tensor(c, "blk.1.ffn_down_exps.weight");
    const GgufTensor* router = tensor(c, "blk.1.ffn_gate_inp.weight");
    ASSERT_TRUE(gate && down && router && tensor(c, "blk.1.ffn_up_exps.weight"));
    EXPECT_EQ(gate->ne, (std::vector<int64_t>{64, 128, 8}));  // {n_embd, n_ff_exp, n_expert}
    EXPECT_EQ(down->ne, (std::vector<int64_t>{128, 64, 8}));
    EXPECT_EQ(gate->dtype, DType::kF16);
    EXPECT_EQ(router->ne, (std::vector<int64_t>{64, 8}));
    EXPECT_EQ(router->dtype, DType::kF32);  // the converter and llama-quantize keep the router in f32
    EXPECT_EQ(tensor(c, "blk.1.ffn_gate.weight"), nullptr);
    EXPECT_NE(tensor(c, "blk.1.attn_q_norm.weight"), nullptr);
  }
  {
    SynthModel m = small("mixtral-8x7b");
    ASSERT_TRUE(write_model("gguf", dir + "/x.gguf", m.config, m.weights, {}).ok());
    std::string keep;
    GgufContents c = parse_file(dir + "/x.gguf", keep);
    EXPECT_EQ(*c.get_string("general.architecture"), "llama");
    EXPECT_EQ(*c.get_int("llama.expert_count"), 8);
    EXPECT_EQ(*c.get_int("llama.expert_used_count"), 2);
    EXPECT_EQ(*c.get_int("llama.feed_forward_length"), 128);  // the experts' width in llama.cpp's llama arch
    EXPECT_EQ(c.find("llama.expert_feed_forward_length"), nullptr);
    EXPECT_NE(tensor(c, "blk.0.ffn_up_exps.weight"), nullptr);
  }
}

TEST(MoeGguf, WhatTheEngineDoesNotComputeIsRefusedByName) {
  const std::string dir = testing::scratch_dir();
  SynthModel m = small("qwen3-30b-a3b");
  const std::string path = dir + "/q.gguf";
  ASSERT_TRUE(write_model("gguf", path, m.config, m.weights, {}).ok());
  auto refused = [](const std::string& file, const std::string& needle) {
    auto r = load_model(file, "", false);
    ASSERT_FALSE(r.ok()) << file;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  refused(with_key(path, "qwen3moe.expert_shared_count", GgufValue::u32(1)), "expert_shared_count");
  refused(with_key(path, "qwen3moe.expert_group_count", GgufValue::u32(4)), "expert_group_count");
  refused(with_key(path, "qwen3moe.expert_gating_func", GgufValue::u32(2)), "expert_gating_func");
  refused(with_key(path, "qwen3moe.expert_used_count", GgufValue::u32(9)), "experts used per token 9");
  refused(with_key(path, "qwen3moe.expert_count", GgufValue::u32(0)), "expert_count");
  // A family Tessera runs only dense, stating experts.
  SynthModel q = small("qwen3-0.6b");
  ASSERT_TRUE(write_model("gguf", dir + "/d.gguf", q.config, q.weights, {}).ok());
  refused(with_key(dir + "/d.gguf", "qwen3.expert_count", GgufValue::u32(8)), "qwen3.expert_count");
  // The engine's kinds the GGUF families cannot state.
  ModelConfig mixed = m.config;
  mixed.layer_kinds = {LayerKind{AttentionKind::kFull, FfnKind::kMoe}, LayerKind{}};
  SynthModel mm = synthesize_weights(mixed, 5);
  Status s = write_model("gguf", dir + "/mixed.gguf", mixed, mm.weights, {});
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("mix dense and expert layers"), std::string::npos) << s.message();
}

// llama.cpp's fused ffn_gate_up_exps [E, 2 ff, dim] (gate rows, then up rows, per expert) computes what the
// separate tensors do.
TEST(MoeGguf, FusedGateUpExpertsGiveTheSameModel) {
  const std::string dir = testing::scratch_dir();
  SynthModel m = small("qwen3-30b-a3b");
  const ModelConfig& c = m.config;
  const int64_t e = c.moe.n_experts, f = c.moe.expert_hidden_dim, d = c.dim;
  std::vector<std::vector<float>> fused(static_cast<size_t>(c.n_layers));
  ModelWeights w(std::make_shared<int>(0));
  for (const WeightTensor& t : m.weights.tensors())
    if (t.name.find("ffn_gate_exps") == std::string::npos && t.name.find("ffn_up_exps") == std::string::npos) w.add(t);
  for (int l = 0; l < c.n_layers; ++l) {
    const auto* g = reinterpret_cast<const float*>(m.weights.find(layer_tensor_name(l, "ffn_gate_exps.weight"))->data);
    const auto* u = reinterpret_cast<const float*>(m.weights.find(layer_tensor_name(l, "ffn_up_exps.weight"))->data);
    std::vector<float>& out = fused[static_cast<size_t>(l)];
    for (int64_t x = 0; x < e; ++x) {
      out.insert(out.end(), g + x * f * d, g + (x + 1) * f * d);
      out.insert(out.end(), u + x * f * d, u + (x + 1) * f * d);
    }
    w.add({layer_tensor_name(l, "ffn_gate_up_exps.weight"),
           DType::kF32,
           {e, 2 * f, d},
           reinterpret_cast<const uint8_t*>(out.data()),
           out.size() * sizeof(float)});
  }
  ASSERT_TRUE(write_model("gguf", dir + "/fused.gguf", c, w, {}).ok());
  std::string keep;
  GgufContents parsed = parse_file(dir + "/fused.gguf", keep);
  ASSERT_NE(tensor(parsed, "blk.0.ffn_gate_up_exps.weight"), nullptr);
  EXPECT_EQ(tensor(parsed, "blk.0.ffn_gate_exps.weight"), nullptr);
  auto loaded = load_model(dir + "/fused.gguf", "", false);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  RunOut want = run("ref", c, m.weights), got = run("ref", loaded->config, loaded->weights);
  EXPECT_EQ(got.logits, want.logits);
  EXPECT_EQ(got.greedy, want.greedy);
  EXPECT_EQ(run("cpu", loaded->config, loaded->weights).greedy, run("cpu", c, m.weights).greedy);
}

TEST(MoeHf, OneMatrixPerExpertAsTheCheckpointsHoldThem) {
  const std::string dir = testing::scratch_dir();
  for (const char* shape : {"qwen3-30b-a3b", "mixtral-8x7b"}) {
    SynthModel m = small(shape);
    const std::string out = dir + "/" + shape;
    ASSERT_TRUE(write_model("safetensors", out, m.config, m.weights, {}).ok());
    const bool mixtral = std::string(shape) == "mixtral-8x7b";
    Json cfg = Json::parse(*read_file(out + "/config.json"));
    EXPECT_EQ(cfg["architectures"][0], mixtral ? "MixtralForCausalLM" : "Qwen3MoeForCausalLM");
    EXPECT_EQ(cfg[mixtral ? "num_local_experts" : "num_experts"], 8);
    EXPECT_EQ(cfg["num_experts_per_tok"], 2);
    if (!mixtral) {
      EXPECT_EQ(cfg["moe_intermediate_size"], 128);
      EXPECT_EQ(cfg["norm_topk_prob"], true);
    }
    std::string bytes = *read_file(out + "/model.safetensors");
    auto st = parse_safetensors({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, out);
    ASSERT_TRUE(st.ok());
    std::map<std::string, std::vector<int64_t>> shapes;
    for (const SafetensorsTensor& t : st->tensors) shapes[t.name] = t.shape;
    const std::string e7 = mixtral ? "model.layers.1.block_sparse_moe.experts.7.w2.weight"
                                   : "model.layers.1.mlp.experts.7.down_proj.weight";
    EXPECT_EQ(shapes[e7], (std::vector<int64_t>{64, 128}));
    EXPECT_EQ(shapes[mixtral ? "model.layers.1.block_sparse_moe.gate.weight" : "model.layers.1.mlp.gate.weight"],
              (std::vector<int64_t>{8, 64}));
    EXPECT_EQ(shapes.count("model.layers.1.mlp.gate_proj.weight"), 0u);
    auto loaded = load_model(out, "", false);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    EXPECT_EQ(run("ref", loaded->config, loaded->weights).logits, run("ref", m.config, m.weights).logits) << shape;
  }
}

// transformers 5 saves Qwen3-MoE's experts stacked: mlp.experts.gate_up_proj [E, 2 ff, dim] and down_proj.
TEST(MoeHf, ExpertsStackedAsTransformers5SavesThem) {
  const std::string dir = testing::scratch_dir();
  SynthModel m = small("qwen3-30b-a3b");
  const std::string src = dir + "/per-expert", dst = dir + "/stacked";
  ASSERT_TRUE(write_model("safetensors", src, m.config, m.weights, {}).ok());
  std::string bytes = *read_file(src + "/model.safetensors");
  auto st = parse_safetensors({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, src);
  ASSERT_TRUE(st.ok());
  std::map<std::string, const SafetensorsTensor*> by_name;
  for (const SafetensorsTensor& t : st->tensors) by_name[t.name] = &t;
  const int64_t e = 8, f = 128, d = 64;
  std::vector<SafetensorsTensor> out;
  std::vector<std::vector<uint8_t>> owned;
  for (const SafetensorsTensor& t : st->tensors)
    if (t.name.find(".experts.") == std::string::npos) out.push_back(t);
  for (int l = 0; l < 2; ++l) {
    std::vector<uint8_t> gu, down;
    for (int x = 0; x < e; ++x) {
      for (const char* p : {"gate_proj", "up_proj"}) {
        const SafetensorsTensor* t = by_name[fmt::format("model.layers.{}.mlp.experts.{}.{}.weight", l, x, p)];
        gu.insert(gu.end(), t->data, t->data + t->bytes);
      }
      const SafetensorsTensor* t = by_name[fmt::format("model.layers.{}.mlp.experts.{}.down_proj.weight", l, x)];
      down.insert(down.end(), t->data, t->data + t->bytes);
    }
    owned.push_back(std::move(gu));
    out.push_back({fmt::format("model.layers.{}.mlp.experts.gate_up_proj", l),
                   DType::kF32,
                   {e, 2 * f, d},
                   owned.back().data(),
                   owned.back().size()});
    owned.push_back(std::move(down));
    out.push_back({fmt::format("model.layers.{}.mlp.experts.down_proj", l),
                   DType::kF32,
                   {e, d, f},
                   owned.back().data(),
                   owned.back().size()});
  }
  std::filesystem::create_directories(dst);
  std::filesystem::copy_file(src + "/config.json", dst + "/config.json");
  ASSERT_TRUE(write_safetensors(dst + "/model.safetensors", out).ok());
  auto loaded = load_model(dst, "", false);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_NE(loaded->weights.find("blk.0.ffn_gate_up_exps.weight"), nullptr);
  RunOut want = run("ref", m.config, m.weights), got = run("ref", loaded->config, loaded->weights);
  EXPECT_EQ(got.logits, want.logits);
  // A missing expert is named.
  out.erase(std::remove_if(out.begin(), out.end(),
                           [](const SafetensorsTensor& t) { return t.name == "model.layers.1.mlp.experts.down_proj"; }),
            out.end());
  ASSERT_TRUE(write_safetensors(dst + "/model.safetensors", out).ok());
  auto broken = load_model(dst, "", false);
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find("model.layers.1.mlp.experts.0.down_proj.weight"), std::string::npos)
      << broken.status().message();
}

// gpt-oss as transformers keeps it: gate_up_proj [E, dim, 2 ff] with gate and up interleaved in its columns,
// down_proj [E, ff, dim], biases alike, the router and sinks under their own names; MXFP4 safetensors refused.
TEST(MoeHf, GptOssExpertsAsTransformersKeepsThem) {
  const std::string dir = testing::scratch_dir();
  SynthModel m = small("gpt-oss-20b");
  ASSERT_TRUE(write_model("safetensors", dir + "/oss", m.config, m.weights, {}).ok());
  std::string bytes = *read_file(dir + "/oss/model.safetensors");
  auto st = parse_safetensors({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, dir);
  ASSERT_TRUE(st.ok());
  std::map<std::string, const SafetensorsTensor*> by;
  for (const SafetensorsTensor& t : st->tensors) by[t.name] = &t;
  const SafetensorsTensor* gu = by["model.layers.1.mlp.experts.gate_up_proj"];
  ASSERT_NE(gu, nullptr);
  EXPECT_EQ(gu->shape, (std::vector<int64_t>{8, 64, 256}));
  EXPECT_EQ(by["model.layers.1.mlp.experts.down_proj"]->shape, (std::vector<int64_t>{8, 128, 64}));
  EXPECT_EQ(by["model.layers.1.mlp.experts.gate_up_proj_bias"]->shape, (std::vector<int64_t>{8, 256}));
  EXPECT_EQ(by["model.layers.1.self_attn.sinks"]->shape, (std::vector<int64_t>{4}));
  EXPECT_NE(by["model.layers.1.mlp.router.bias"], nullptr);
  EXPECT_NE(by["model.layers.1.self_attn.o_proj.bias"], nullptr);
  // x @ gate_up_proj: column 2j of expert 3 is gate row j, column 2j + 1 up row j (here j = 5, input 7).
  const auto* g = reinterpret_cast<const float*>(m.weights.find("blk.1.ffn_gate_exps.weight")->data);
  const auto* u = reinterpret_cast<const float*>(m.weights.find("blk.1.ffn_up_exps.weight")->data);
  const auto* hf = reinterpret_cast<const float*>(gu->data);
  const int64_t e = 3, j = 5, i = 7, f = 128, d = 64;
  EXPECT_EQ(hf[(e * d + i) * 2 * f + 2 * j], g[(e * f + j) * d + i]);
  EXPECT_EQ(hf[(e * d + i) * 2 * f + 2 * j + 1], u[(e * f + j) * d + i]);
  auto loaded = load_model(dir + "/oss", "", false);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(run("ref", loaded->config, loaded->weights).logits, run("ref", m.config, m.weights).logits);
  // The published checkpoints keep their experts as MXFP4 blocks in safetensors: refused by name.
  Json cfg = Json::parse(*read_file(dir + "/oss/config.json"));
  cfg["quantization_config"] = {{"quant_method", "mxfp4"}};
  const std::string text = cfg.dump();
  ASSERT_TRUE(
      write_file_atomic(dir + "/oss/config.json", {reinterpret_cast<const uint8_t*>(text.data()), text.size()}).ok());
  auto refused = load_model(dir + "/oss", "", false);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("quantization_config mxfp4"), std::string::npos)
      << refused.status().message();
}

// Qwen3-MoE's mlp_only_layers makes some layers dense: the kinds are per layer, and the runner follows them.
TEST(MoeHf, DenseLayersAmongExpertLayers) {
  const std::string dir = testing::scratch_dir();
  ModelConfig c = *synth_shape_small("qwen3-30b-a3b");
  c.n_layers = 3;
  c.layer_kinds = {LayerKind{AttentionKind::kFull, FfnKind::kMoe}, LayerKind{},
                   LayerKind{AttentionKind::kFull, FfnKind::kMoe}};
  SynthModel m = synthesize_weights(c, 9);
  EXPECT_NE(m.weights.find("blk.1.ffn_gate.weight"), nullptr);
  EXPECT_EQ(m.weights.find("blk.1.ffn_gate_exps.weight"), nullptr);
  ASSERT_TRUE(write_model("safetensors", dir + "/mixed", c, m.weights, {}).ok());
  Json cfg = Json::parse(*read_file(dir + "/mixed/config.json"));
  EXPECT_EQ(cfg["mlp_only_layers"], Json::array({1}));
  auto loaded = load_model(dir + "/mixed", "", false);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(loaded->config.layer_kinds, c.layer_kinds);
  RunOut a = run("ref", loaded->config, loaded->weights);
  EXPECT_EQ(a.logits, run("ref", c, m.weights).logits);
  EXPECT_EQ(run("cpu", loaded->config, loaded->weights).greedy, a.greedy);
  // Shared experts (Qwen2-MoE's) are not computed: refused, not ignored.
  cfg["shared_expert_intermediate_size"] = 256;
  const std::string text = cfg.dump();
  ASSERT_TRUE(
      write_file_atomic(dir + "/mixed/config.json", {reinterpret_cast<const uint8_t*>(text.data()), text.size()}).ok());
  auto refused = load_model(dir + "/mixed", "", false);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("shared_expert_intermediate_size"), std::string::npos);
}

// Rows routed to different experts share one step; chunked prefill and batched decode give every row the bits it
// gets alone (the cpu kernels compute a row the same way whatever shares its expert's block).
TEST(MoeEngine, BatchingAndChunkingNeverChangeARow) {
  for (const char* shape : {"qwen3-30b-a3b", "mixtral-8x7b"}) {
    ModelConfig c = *synth_shape_small(shape);
    c.n_layers = 2;
    ASSERT_TRUE(resize_synth_shape(c, 256, 512, -1).ok());  // K-quant rows
    SynthModel m = synthesize_weights(c, 11);
    for (std::optional<DType> dt : {std::optional<DType>(), std::optional<DType>(DType::kQ4_K)}) {
      auto device = ops::open_device("cpu");
      ASSERT_TRUE(device.ok());
      engine::RunnerOptions o;
      o.max_batch_tokens = 32;
      o.max_sequences = 3;
      o.weight_dtype = dt;
      auto r = engine::ModelRunner::create(**device, c, m.weights, o);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      std::vector<float> one, chunked, single;
      engine::SequenceKv a, b, s1;
      ASSERT_TRUE((*r)->prefill(a, kPrompt, one).ok());
      // The same prompt token by token.
      for (size_t i = 0; i < kPrompt.size(); ++i) {
        engine::SequenceKv* p = &b;
        ASSERT_TRUE((*r)->decode(std::span(&p, 1), std::span(&kPrompt[i], 1), chunked).ok());
      }
      EXPECT_EQ(one, chunked) << shape;
      // Batched decode of two sequences against one alone.
      ASSERT_TRUE((*r)->prefill(s1, std::span(kPrompt).first(5), single).ok());
      engine::SequenceKv* pair[2] = {&a, &s1};
      const TokenId next[2] = {17, 300};
      std::vector<float> both, alone;
      ASSERT_TRUE((*r)->decode(pair, next, both).ok());
      engine::SequenceKv* only = &b;
      ASSERT_TRUE((*r)->decode(std::span(&only, 1), std::span(next, 1), alone).ok());
      EXPECT_TRUE(std::equal(alone.begin(), alone.end(), both.begin())) << shape;
    }
  }
}

// opencl runs the MoE layers (its own kernels: one work-item per output, each reading its expert's row) and gpt-oss's
// attention sinks, and gives ref's greedy tokens.
TEST(MoeEngine, OpenClRunsExpertLayersAndSinks) {
  auto cl = ops::open_device("opencl");
  if (!cl.ok()) GTEST_SKIP() << "no opencl device here: " << cl.status().message();
  for (const char* shape : {"qwen3-30b-a3b", "mixtral-8x7b", "gpt-oss-20b"}) {
    SynthModel m = small(shape);
    EXPECT_TRUE(engine::unsupported_layer_features(**cl, m.config).empty()) << shape;
    EXPECT_EQ(run("opencl", m.config, m.weights).greedy, run("ref", m.config, m.weights).greedy) << shape;
  }
}

// A device without attention sinks refuses gpt-oss at load, naming them (not at the first step).
TEST(MoeEngine, ADeviceWithoutSinksRefusesGptOssByName) {
  SynthModel oss = small("gpt-oss-20b");
  auto cpu = ops::open_device("cpu");
  ASSERT_TRUE(cpu.ok());
  EXPECT_TRUE(engine::unsupported_layer_features(**cpu, oss.config).empty());
  testing::RefusingDevice dev(std::move(ops::open_device("ref").value()), "without-sinks", [](const ops::Op& op) {
    const auto* p = std::get_if<ops::AttentionPrefillOp>(&op);
    const auto* d = std::get_if<ops::AttentionDecodeOp>(&op);
    return (p && p->sinks.valid()) || (d && d->sinks.valid()) ? std::string("no sinks") : std::string();
  });
  EXPECT_EQ(engine::unsupported_layer_features(dev, oss.config), (std::vector<std::string>{"attention sinks"}));
  auto r = engine::ModelRunner::create(dev, oss.config, oss.weights, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("attention sinks"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace tessera::model
