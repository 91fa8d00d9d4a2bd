// Gemma 4 in Hugging Face folders (model/formats/safetensors/hf_gemma4.h), checked against the GGUF file
// `tessera synth` writes in llama.cpp's converter's layout, not against Tessera's own reader: the written
// model.safetensors and config.json are parsed raw and compared tensor by tensor with the raw GGUF tensors under a
// name table written out here (transformers' names, the converter's GGUF names), so a writer and reader wrong the same
// way cannot pass. A Gemma4ForConditionalGeneration folder (text_config, model.language_model.*, a vision tower) is
// built by hand from that and must load to the GGUF's weights; bad configs are refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>

#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "model/formats/gguf/gguf_file.h"
#include "model/formats/gguf/gguf_model.h"
#include "model/formats/safetensors/safetensors_file.h"
#include "model/loader.h"
#include "model/model_writer.h"
#include "model/synth_gemma4.h"
#include "support/paths.h"

namespace tessera::model {
namespace {

using Json = nlohmann::json;

// llama.cpp's GGUF name (after blk.N.) -> transformers' (after model.layers.N.), from gguf-py's tensor_mapping.py.
const std::map<std::string, std::string> kLayerNames = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"post_attention_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_norm.weight", "pre_feedforward_layernorm.weight"},
    {"post_ffw_norm.weight", "post_feedforward_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
    {"inp_gate.weight", "per_layer_input_gate.weight"},
    {"proj.weight", "per_layer_projection.weight"},
    {"post_norm.weight", "post_per_layer_input_norm.weight"},
    {"layer_output_scale.weight", "layer_scalar"},
    {"ffn_gate_inp.weight", "router.proj.weight"},
    {"ffn_gate_inp.scale", "router.scale"},
    {"ffn_down_exps.scale", "router.per_expert_scale"},
    {"ffn_gate_up_exps.weight", "experts.gate_up_proj"},
    {"ffn_down_exps.weight", "experts.down_proj"},
    {"pre_ffw_norm_2.weight", "pre_feedforward_layernorm_2.weight"},
    {"post_ffw_norm_1.weight", "post_feedforward_layernorm_1.weight"},
    {"post_ffw_norm_2.weight", "post_feedforward_layernorm_2.weight"},
};
const std::map<std::string, std::string> kGlobalNames = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"per_layer_token_embd.weight", "model.embed_tokens_per_layer.weight"},
    {"per_layer_model_proj.weight", "model.per_layer_model_projection.weight"},
    {"per_layer_proj_norm.weight", "model.per_layer_projection_norm.weight"},
    {"output_norm.weight", "model.norm.weight"},
};

std::string hf_name(const std::string& gguf) {
  if (auto it = kGlobalNames.find(gguf); it != kGlobalNames.end()) return it->second;
  const size_t dot = gguf.find('.', 4);
  return "model.layers." + gguf.substr(4, dot - 4) + "." + kLayerNames.at(gguf.substr(dot + 1));
}

struct Fixture {
  Gemma4Shape shape;
  std::string gguf_path, hf_dir;
  std::string gguf_bytes, st_bytes;
  GgufContents gguf;
  SafetensorsContents st;
  Json cfg;
};

// `tessera synth --shape S --small --layers N --format gguf | safetensors`, the folder written from the GGUF file.
void make(const std::string& shape, int layers, Fixture& f) {
  const std::string dir = testing::scratch_dir();
  auto s = gemma4_shape(shape, true);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(resize_gemma4_shape(*s, layers, 0, 0, -1).ok());
  f.shape = *s;
  f.gguf_path = dir + "/m.gguf";
  f.hf_dir = dir + "/hf";
  ASSERT_TRUE(write_gemma4_gguf(*s, 5, {}, f.gguf_path).ok());
  auto g = load_gguf_model(f.gguf_path);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  Status w = write_model("safetensors", f.hf_dir, g->config, g->weights, {});
  ASSERT_TRUE(w.ok()) << w.to_string();
  f.gguf_bytes = *read_file(f.gguf_path);
  f.st_bytes = *read_file(f.hf_dir + "/model.safetensors");
  auto gc = parse_gguf({reinterpret_cast<const uint8_t*>(f.gguf_bytes.data()), f.gguf_bytes.size()}, f.gguf_path);
  ASSERT_TRUE(gc.ok());
  f.gguf = std::move(*gc);
  auto sc = parse_safetensors({reinterpret_cast<const uint8_t*>(f.st_bytes.data()), f.st_bytes.size()}, f.hf_dir);
  ASSERT_TRUE(sc.ok());
  f.st = std::move(*sc);
  f.cfg = Json::parse(*read_file(f.hf_dir + "/config.json"));
}

// Every GGUF tensor but rope_freqs (config.json's rope_parameters) is in the folder under transformers' name with
// the same shape and bytes: norms as the multiplier itself (Gemma 4's norm_shift is 0), experts fused gate-first.
void expect_same_tensors(const Fixture& f) {
  std::map<std::string, const SafetensorsTensor*> by;
  for (const SafetensorsTensor& t : f.st.tensors) by[t.name] = &t;
  size_t compared = 0;
  for (const GgufTensor& g : f.gguf.tensors) {
    if (g.name == "rope_freqs.weight") continue;
    const std::string n = hf_name(g.name);
    auto it = by.find(n);
    ASSERT_NE(it, by.end()) << g.name << " -> " << n;
    EXPECT_EQ(it->second->shape, g.shape()) << n;
    EXPECT_EQ(it->second->dtype, g.dtype) << n;
    ASSERT_EQ(it->second->bytes, g.bytes) << n;
    EXPECT_EQ(std::memcmp(it->second->data, g.data, g.bytes), 0) << n;
    ++compared;
  }
  EXPECT_EQ(compared, f.st.tensors.size());  // nothing else in the folder
  // The multiplier, not w - 1: synth's norms are 1 + noise.
  const auto* norm = reinterpret_cast<const float*>(by.at("model.layers.0.input_layernorm.weight")->data);
  EXPECT_NEAR(norm[0], 1.0f, 0.2f);
}

TEST(Gemma4Hf, DenseFolderHasTransformersLayoutAndTheGgufBytes) {
  Fixture f;
  make("gemma4-e2b", 10, f);
  if (HasFatalFailure()) return;
  expect_same_tensors(f);
  const Json& c = f.cfg;
  EXPECT_EQ(c["architectures"], Json::array({"Gemma4ForCausalLM"}));
  EXPECT_EQ(c["model_type"], "gemma4_text");
  Json types = Json::array();
  for (int l = 0; l < 10; ++l) types.push_back(l % 5 == 4 ? "full_attention" : "sliding_attention");
  EXPECT_EQ(c["layer_types"], types);
  EXPECT_EQ(c["num_hidden_layers"], 10);
  EXPECT_EQ(c["num_kv_shared_layers"], 5);
  EXPECT_EQ(c["hidden_size_per_layer_input"], 16);
  EXPECT_EQ(c["vocab_size_per_layer_input"], 512);
  EXPECT_EQ(c["use_double_wide_mlp"], true);
  EXPECT_EQ(c["intermediate_size"], 128);
  EXPECT_EQ(c["head_dim"], 32);
  EXPECT_EQ(c["global_head_dim"], 64);
  EXPECT_EQ(c["num_key_value_heads"], 1);
  EXPECT_EQ(c["attention_k_eq_v"], false);
  EXPECT_EQ(c["final_logit_softcapping"], 30.0);
  EXPECT_EQ(c["sliding_window"], 8);
  EXPECT_EQ(c["tie_word_embeddings"], true);
  EXPECT_EQ(c["hidden_activation"], "gelu_pytorch_tanh");
  EXPECT_EQ(c["enable_moe_block"], false);
  const Json& full = c["rope_parameters"]["full_attention"];
  EXPECT_EQ(full["rope_type"], "proportional");
  EXPECT_EQ(full["rope_theta"], 1e6);
  EXPECT_EQ(full["partial_rotary_factor"], 0.25);  // rope_freqs: 8 pairs of 32 rotate
  EXPECT_EQ(c["rope_parameters"]["sliding_attention"]["rope_type"], "default");
  EXPECT_EQ(c["rope_parameters"]["sliding_attention"]["rope_theta"], 1e4);
  // Double-wide MLP in the KV-sharing layers, per-layer embeddings laid out [vocab, layers x 16].
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const SafetensorsTensor& t : f.st.tensors) shapes[t.name] = t.shape;
  EXPECT_EQ(shapes["model.layers.4.mlp.gate_proj.weight"], (std::vector<int64_t>{128, 64}));
  EXPECT_EQ(shapes["model.layers.5.mlp.gate_proj.weight"], (std::vector<int64_t>{256, 64}));
  EXPECT_EQ(shapes["model.embed_tokens_per_layer.weight"], (std::vector<int64_t>{512, 160}));
  EXPECT_EQ(shapes["model.layers.3.layer_scalar"], (std::vector<int64_t>{1}));
}

TEST(Gemma4Hf, MoeFolderHasFusedExpertsRouterScalesAndNoFullLayerV) {
  Fixture f;
  make("gemma4-26b-a4b", 6, f);
  if (HasFatalFailure()) return;
  expect_same_tensors(f);
  const Json& c = f.cfg;
  EXPECT_EQ(c["enable_moe_block"], true);
  EXPECT_EQ(c["num_experts"], 8);
  EXPECT_EQ(c["top_k_experts"], 2);
  EXPECT_EQ(c["moe_intermediate_size"], 128);
  EXPECT_EQ(c["attention_k_eq_v"], true);
  EXPECT_EQ(c["num_key_value_heads"], 2);
  EXPECT_EQ(c["num_global_key_value_heads"], 1);
  EXPECT_EQ(c["num_kv_shared_layers"], 0);
  EXPECT_EQ(c["hidden_size_per_layer_input"], 0);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const SafetensorsTensor& t : f.st.tensors) shapes[t.name] = t.shape;
  // transformers' Gemma4 experts: gate_up_proj [E, 2 ff, dim] (chunked gate, then up), down_proj [E, dim, ff].
  EXPECT_EQ(shapes["model.layers.5.experts.gate_up_proj"], (std::vector<int64_t>{8, 256, 64}));
  EXPECT_EQ(shapes["model.layers.5.experts.down_proj"], (std::vector<int64_t>{8, 64, 128}));
  EXPECT_EQ(shapes["model.layers.5.router.proj.weight"], (std::vector<int64_t>{8, 64}));
  EXPECT_EQ(shapes["model.layers.5.router.scale"], (std::vector<int64_t>{64}));
  EXPECT_EQ(shapes["model.layers.5.router.per_expert_scale"], (std::vector<int64_t>{8}));
  EXPECT_EQ(shapes.count("model.layers.5.self_attn.v_proj.weight"), 0u);  // V is K in full layers
  EXPECT_EQ(shapes["model.layers.4.self_attn.v_proj.weight"], (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(shapes["model.layers.5.self_attn.k_proj.weight"], (std::vector<int64_t>{64, 64}));  // 1 head of 64
}

// A Gemma4ForConditionalGeneration folder: the text model's keys under text_config, its tensors under
// model.language_model., beside a vision tower. Built here from the GGUF tensors, it loads to them.
TEST(Gemma4Hf, ConditionalGenerationFolderLoadsItsTextModel) {
  Fixture f;
  make("gemma4-e2b", 10, f);
  if (HasFatalFailure()) return;
  const std::string dir = std::filesystem::path(f.gguf_path).parent_path().string() + "/cg";
  std::filesystem::create_directories(dir);
  Json text = f.cfg;
  text.erase("architectures");
  text["model_type"] = "gemma4_text";
  Json top = {{"architectures", {"Gemma4ForConditionalGeneration"}},
              {"model_type", "gemma4"},
              {"text_config", text},
              {"vision_config", {{"hidden_size", 32}}},
              {"hidden_size", 999}};  // the top level's keys yield to text_config's
  const std::string cfg_text = top.dump();
  ASSERT_TRUE(
      write_file_atomic(dir + "/config.json", {reinterpret_cast<const uint8_t*>(cfg_text.data()), cfg_text.size()})
          .ok());
  std::vector<SafetensorsTensor> out;
  for (const GgufTensor& g : f.gguf.tensors) {
    if (g.name == "rope_freqs.weight") continue;
    std::string n = hf_name(g.name);
    n = "model.language_model." + n.substr(std::string_view("model.").size());
    out.push_back({n, g.dtype, g.shape(), g.data, g.bytes});
  }
  std::vector<float> patch(12, 0.5f);
  out.push_back({"model.vision_tower.patch_embedder.input_proj.weight",
                 DType::kF32,
                 {3, 4},
                 reinterpret_cast<const uint8_t*>(patch.data()),
                 patch.size() * sizeof(float)});
  ASSERT_TRUE(write_safetensors(dir + "/model.safetensors", out, {{"format", "pt"}}).ok());
  auto hf = load_model(dir, "", false);
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  auto gg = load_gguf_model(f.gguf_path);
  ASSERT_TRUE(gg.ok());
  const ModelConfig &a = hf->config, &b = gg->config;
  EXPECT_EQ(a.arch, "gemma4");
  EXPECT_EQ(a.dim, b.dim);
  EXPECT_EQ(a.n_layers, b.n_layers);
  EXPECT_EQ(a.n_heads, b.n_heads);
  EXPECT_EQ(a.hidden_dim, b.hidden_dim);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.max_seq_len, b.max_seq_len);
  EXPECT_EQ(a.embedding_scale, b.embedding_scale);
  EXPECT_EQ(a.attn_scale, b.attn_scale);
  EXPECT_EQ(a.qk_norm, b.qk_norm);
  EXPECT_EQ(a.v_norm, b.v_norm);
  EXPECT_EQ(a.post_norms, b.post_norms);
  EXPECT_EQ(a.gelu_mlp, b.gelu_mlp);
  EXPECT_EQ(a.layer_output_scale, b.layer_output_scale);
  EXPECT_EQ(a.rope_layout, b.rope_layout);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.head_dim_sliding, b.head_dim_sliding);
  EXPECT_EQ(a.n_kv_heads, b.n_kv_heads);
  EXPECT_EQ(a.layer_kv_heads, b.layer_kv_heads);
  EXPECT_EQ(a.layer_hidden_dims, b.layer_hidden_dims);
  EXPECT_EQ(a.shared_kv_layers, b.shared_kv_layers);
  EXPECT_EQ(a.per_layer_dim, b.per_layer_dim);
  EXPECT_EQ(a.sliding_window, b.sliding_window);
  EXPECT_EQ(a.sliding_pattern, b.sliding_pattern);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.rope_theta_sliding, b.rope_theta_sliding);
  EXPECT_EQ(a.final_softcap, b.final_softcap);
  EXPECT_EQ(a.norm_eps, b.norm_eps);
  EXPECT_EQ(a.tied_embeddings, b.tied_embeddings);
  EXPECT_EQ(hf->weights.tensors().size(), gg->weights.tensors().size());  // the vision tower is not among them
  for (const WeightTensor& t : gg->weights.tensors()) {
    const WeightTensor* u = hf->weights.find(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    EXPECT_EQ(u->shape, t.shape) << t.name;
    ASSERT_EQ(u->bytes, t.bytes) << t.name;
    EXPECT_EQ(std::memcmp(u->data, t.data, t.bytes), 0) << t.name;  // rope_freqs rebuilt from rope_parameters too
  }
}

TEST(Gemma4Hf, BadConfigsAreRefusedByName) {
  Fixture f;
  make("gemma4-26b-a4b", 6, f);
  if (HasFatalFailure()) return;
  auto refused = [&](const std::function<void(Json&)>& edit, const std::string& needle) {
    Json c = f.cfg;
    edit(c);
    const std::string text = c.dump();
    ASSERT_TRUE(
        write_file_atomic(f.hf_dir + "/config.json", {reinterpret_cast<const uint8_t*>(text.data()), text.size()})
            .ok());
    auto m = load_model(f.hf_dir, "", false);
    ASSERT_FALSE(m.ok()) << needle;
    EXPECT_NE(m.status().message().find(needle), std::string::npos) << m.status().message();
    EXPECT_EQ(m.status().message().find('\n'), std::string::npos) << m.status().message();
  };
  refused([](Json& c) { c.erase("layer_types"); }, "layer_types");
  refused([](Json& c) { c["layer_types"][0] = "full_attention"; }, "layer_types");
  refused([](Json& c) { c["layer_types"][2] = "chunked_attention"; }, "chunked_attention");
  refused([](Json& c) { c["rope_parameters"]["sliding_attention"]["partial_rotary_factor"] = 0.5; },
          "partial_rotary_factor");
  refused([](Json& c) { c["rope_parameters"]["full_attention"]["rope_type"] = "yarn"; }, "rope_type 'yarn'");
  refused([](Json& c) { c["rope_parameters"].erase("sliding_attention"); }, "rope_parameters.sliding_attention");
  refused([](Json& c) { c["hidden_activation"] = "silu"; }, "hidden_activation 'silu'");
  refused([](Json& c) { c["attention_k_eq_v"] = false; }, "num_global_key_value_heads");
  refused(
      [](Json& c) {
        c["attention_k_eq_v"] = false;
        c["num_global_key_value_heads"] = nullptr;
      },
      "v_proj");
  refused([](Json& c) { c["num_kv_shared_layers"] = 6; }, "num_kv_shared_layers");
  refused([](Json& c) { c["top_k_experts"] = nullptr; }, "top_k_experts");
  refused([](Json& c) { c["head_dim"] = "big"; }, "head_dim");
  refused([](Json& c) { c["architectures"] = {"Gemma4ForConditionalGeneration"}; }, "text_config");
  // The folder as written still loads.
  const std::string text = f.cfg.dump();
  ASSERT_TRUE(
      write_file_atomic(f.hf_dir + "/config.json", {reinterpret_cast<const uint8_t*>(text.data()), text.size()}).ok());
  EXPECT_TRUE(load_model(f.hf_dir, "", false).ok());
}

}  // namespace
}  // namespace tessera::model
