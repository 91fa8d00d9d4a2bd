// Qwen3.5 (qwen35, qwen35moe) as Hugging Face folders: what the writer puts in config.json and model.safetensors
// is checked against the GGUF file's tensors by reading the folder's bytes directly (so a writer and a reader wrong
// the same way cannot pass): A_log = log(-A), RMSNorm weights stored as w - 1 (but not linear_attn.norm), value heads
// grouped by key head in transformers' order, fused experts, config keys. A folder laid out as
// Qwen3_5*ForConditionalGeneration saves it (nested text_config, model.language_model.*, mtp.* and a vision tower)
// loads to the same weights; bad configs and tensors are refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "model/formats/gguf/gguf_model.h"
#include "model/formats/safetensors/hf_model.h"
#include "model/formats/safetensors/safetensors_file.h"
#include "model/model_writer.h"
#include "model/synth.h"
#include "model/weight_export.h"
#include "support/paths.h"

namespace tessera::model {
namespace {

using Json = nlohmann::json;

SynthModel small(const std::string& shape, int layers) {
  ModelConfig c = *synth_shape_small(shape);
  c.n_layers = layers;
  return synthesize_weights(c, 5);
}

struct Folder {
  std::shared_ptr<MappedFile> file;
  std::map<std::string, SafetensorsTensor> tensors;
  Json config;
};

Folder read_folder(const std::string& dir) {
  Folder f;
  auto file = MappedFile::open(dir + "/model.safetensors");
  EXPECT_TRUE(file.ok()) << file.status().to_string();
  f.file = *file;
  auto st = parse_safetensors(f.file->bytes(), dir);
  EXPECT_TRUE(st.ok()) << st.status().to_string();
  for (SafetensorsTensor& t : st->tensors) f.tensors[t.name] = t;
  f.config = Json::parse(*read_file(dir + "/config.json"));
  return f;
}

std::vector<float> values(const SafetensorsTensor& t) {
  WeightTensor w{t.name, t.dtype, t.shape, t.data, t.bytes};
  return *tensor_to_f32(w);
}
std::vector<float> values(const ModelWeights& w, const std::string& name) {
  const WeightTensor* t = w.find(name);
  EXPECT_NE(t, nullptr) << name;
  return t ? *tensor_to_f32(*t) : std::vector<float>{};
}

// Rows [first, first + n) of a row-major matrix of `cols` columns.
std::vector<float> rows(const std::vector<float>& m, int64_t cols, int64_t first, int64_t n) {
  return {m.begin() + first * cols, m.begin() + (first + n) * cols};
}

// 35B-A3B's small shape: 2 key heads, 4 value heads (2 per key head), so the head order matters; 3 layers: linear,
// full, linear. With 2 heads on 2 the reorder is its own inverse, so the same model with 6 value heads (3 per key
// head) also checks its direction.
void check_layout(int v_heads) {
  SCOPED_TRACE(fmt::format("{} value heads", v_heads));
  const std::string dir = testing::scratch_dir();
  ModelConfig mc = *synth_shape_small("qwen3.5-35b-a3b");
  mc.n_layers = 3;
  mc.linear.v_heads = v_heads;
  SynthModel m = synthesize_weights(mc, 5);
  ASSERT_TRUE(write_model("gguf", dir + "/m.gguf", m.config, m.weights, {}).ok());
  ASSERT_TRUE(write_model("safetensors", dir + "/hf", m.config, m.weights, {}).ok());
  auto gguf = load_gguf_model(dir + "/m.gguf");
  ASSERT_TRUE(gguf.ok()) << gguf.status().to_string();
  const ModelWeights& g = gguf->weights;
  Folder hf = read_folder(dir + "/hf");
  const Json& cfg = hf.config;

  EXPECT_EQ(cfg["architectures"], Json::array({"Qwen3_5MoeForCausalLM"}));
  EXPECT_EQ(cfg["model_type"], "qwen3_5_moe_text");
  EXPECT_EQ(cfg["layer_types"], Json::array({"linear_attention", "full_attention", "linear_attention"}));
  EXPECT_EQ(cfg["full_attention_interval"], 2);
  EXPECT_EQ(cfg["linear_conv_kernel_dim"], 4);
  EXPECT_EQ(cfg["linear_key_head_dim"], 32);
  EXPECT_EQ(cfg["linear_value_head_dim"], 32);
  EXPECT_EQ(cfg["linear_num_key_heads"], 2);
  EXPECT_EQ(cfg["linear_num_value_heads"], v_heads);
  EXPECT_EQ(cfg["rope_parameters"]["mrope_section"], Json::array({2, 1, 1}));
  EXPECT_EQ(cfg["rope_parameters"]["partial_rotary_factor"], 0.25);  // 8 of 32
  EXPECT_EQ(cfg["rope_parameters"]["rope_theta"], 10000000.0);
  EXPECT_FALSE(cfg.contains("rope_theta"));
  EXPECT_EQ(cfg["num_experts"], 8);
  EXPECT_EQ(cfg["num_experts_per_tok"], 2);
  EXPECT_EQ(cfg["moe_intermediate_size"], 128);
  EXPECT_EQ(cfg["shared_expert_intermediate_size"], 128);
  EXPECT_EQ(cfg["tie_word_embeddings"], false);
  EXPECT_EQ(cfg["head_dim"], 32);

  const std::string L0 = "model.layers.0.", L1 = "model.layers.1.";
  for (const char* absent : {"model.layers.0.self_attn.q_proj.weight", "model.layers.1.linear_attn.A_log"})
    EXPECT_EQ(hf.tensors.count(absent), 0u) << absent;
  ASSERT_EQ(hf.tensors.count("lm_head.weight"), 1u);

  // RMSNorm weights as (w - 1), except the gated norm of the linear layers.
  for (const auto& [h, e] : std::vector<std::pair<std::string, std::string>>{
           {L0 + "input_layernorm.weight", "blk.0.attn_norm.weight"},
           {L0 + "post_attention_layernorm.weight", "blk.0.ffn_norm.weight"},
           {L1 + "self_attn.q_norm.weight", "blk.1.attn_q_norm.weight"},
           {L1 + "self_attn.k_norm.weight", "blk.1.attn_k_norm.weight"},
           {"model.norm.weight", "output_norm.weight"}}) {
    ASSERT_EQ(hf.tensors.count(h), 1u) << h;
    std::vector<float> a = values(hf.tensors[h]), b = values(g, e);
    ASSERT_EQ(a.size(), b.size()) << h;
    for (size_t i = 0; i < a.size(); ++i) EXPECT_FLOAT_EQ(a[i], b[i] - 1.0f) << h << " " << i;
  }
  EXPECT_EQ(values(hf.tensors[L0 + "linear_attn.norm.weight"]), values(g, "blk.0.ssm_norm.weight"));

  // Value head order: transformers' head g r + j (key head g's j-th of r) is GGUF's head j Hk + g. With 4 heads: HF
  // head 1 (key head 0's second) is GGUF head 2, HF head 2 (key head 1's first) GGUF head 1, heads 0 and 3 stay.
  const int hk = 2, r = v_heads / hk;
  std::vector<int> hf_to_gguf;
  for (int h = 0; h < v_heads; ++h) hf_to_gguf.push_back((h % r) * hk + h / r);
  if (v_heads == 4) {
    EXPECT_EQ(hf_to_gguf, (std::vector<int>{0, 2, 1, 3}));
  }
  if (v_heads == 6) {
    EXPECT_EQ(hf_to_gguf, (std::vector<int>{0, 2, 4, 1, 3, 5}));
  }
  const int64_t s = 32, d = 64, qk = 2 * hk * s, vd = v_heads * s;
  // A_log = log(-A), per value head.
  std::vector<float> a_log = values(hf.tensors[L0 + "linear_attn.A_log"]), a = values(g, "blk.0.ssm_a");
  std::vector<float> dt = values(hf.tensors[L0 + "linear_attn.dt_bias"]), dt_g = values(g, "blk.0.ssm_dt.bias");
  ASSERT_EQ(a_log.size(), static_cast<size_t>(v_heads));
  for (int h = 0; h < v_heads; ++h) {
    EXPECT_NEAR(a_log[h], std::log(-a[hf_to_gguf[h]]), 1e-6) << h;
    EXPECT_EQ(dt[h], dt_g[hf_to_gguf[h]]) << h;
  }
  EXPECT_NE(dt[1], dt_g[1]);  // the order differs: a check that could not pass without the reorder
  // in_proj_qkv: q and k rows as they are, V rows by head; in_proj_z and in_proj_a / in_proj_b alike.
  std::vector<float> qkv = values(hf.tensors[L0 + "linear_attn.in_proj_qkv.weight"]),
                     qkv_g = values(g, "blk.0.attn_qkv.weight");
  EXPECT_EQ(rows(qkv, d, 0, qk), rows(qkv_g, d, 0, qk));
  std::vector<float> z = values(hf.tensors[L0 + "linear_attn.in_proj_z.weight"]),
                     z_g = values(g, "blk.0.attn_gate.weight");
  std::vector<float> b = values(hf.tensors[L0 + "linear_attn.in_proj_b.weight"]),
                     b_g = values(g, "blk.0.ssm_beta.weight");
  std::vector<float> al = values(hf.tensors[L0 + "linear_attn.in_proj_a.weight"]),
                     al_g = values(g, "blk.0.ssm_alpha.weight");
  for (int h = 0; h < v_heads; ++h) {
    EXPECT_EQ(rows(qkv, d, qk + h * s, s), rows(qkv_g, d, qk + hf_to_gguf[h] * s, s)) << h;
    EXPECT_EQ(rows(z, d, h * s, s), rows(z_g, d, hf_to_gguf[h] * s, s)) << h;
    EXPECT_EQ(rows(b, d, h, 1), rows(b_g, d, hf_to_gguf[h], 1)) << h;
    EXPECT_EQ(rows(al, d, h, 1), rows(al_g, d, hf_to_gguf[h], 1)) << h;
  }
  EXPECT_NE(rows(qkv, d, qk + s, s), rows(qkv_g, d, qk + s, s));
  // conv1d [C, 1, K]: q and k channels as they are, V channels by head.
  const SafetensorsTensor& conv = hf.tensors[L0 + "linear_attn.conv1d.weight"];
  EXPECT_EQ(conv.shape, (std::vector<int64_t>{qk + vd, 1, 4}));
  std::vector<float> cv = values(conv), cv_g = values(g, "blk.0.ssm_conv1d.weight");
  EXPECT_EQ(rows(cv, 4, 0, qk), rows(cv_g, 4, 0, qk));
  for (int h = 0; h < v_heads; ++h)
    EXPECT_EQ(rows(cv, 4, qk + h * s, s), rows(cv_g, 4, qk + hf_to_gguf[h] * s, s)) << h;
  // out_proj [dim, Hv S]: columns by head.
  std::vector<float> o = values(hf.tensors[L0 + "linear_attn.out_proj.weight"]),
                     o_g = values(g, "blk.0.ssm_out.weight");
  for (int64_t row = 0; row < d; row += 17)
    for (int h = 0; h < v_heads; ++h)
      for (int64_t i = 0; i < s; ++i)
        ASSERT_EQ(o[row * vd + h * s + i], o_g[row * vd + hf_to_gguf[h] * s + i]) << row << " " << h << " " << i;

  // Fused experts: gate_up_proj [E, 2 ff, dim] (each expert's gate rows then its up rows), down_proj [E, dim, ff];
  // the router, the shared expert and its gate [1, dim].
  const int64_t e = 8, f = 128;
  const SafetensorsTensor& gu = hf.tensors[L1 + "mlp.experts.gate_up_proj"];
  EXPECT_EQ(gu.shape, (std::vector<int64_t>{e, 2 * f, d}));
  EXPECT_EQ(hf.tensors[L1 + "mlp.experts.down_proj"].shape, (std::vector<int64_t>{e, d, f}));
  std::vector<float> guv = values(gu), gate = values(g, "blk.1.ffn_gate_exps.weight"),
                     up = values(g, "blk.1.ffn_up_exps.weight");
  for (int64_t x : {0, 5}) {
    EXPECT_EQ(rows(guv, d, x * 2 * f, f), rows(gate, d, x * f, f)) << x;
    EXPECT_EQ(rows(guv, d, x * 2 * f + f, f), rows(up, d, x * f, f)) << x;
  }
  EXPECT_EQ(values(hf.tensors[L1 + "mlp.experts.down_proj"]), values(g, "blk.1.ffn_down_exps.weight"));
  EXPECT_EQ(values(hf.tensors[L1 + "mlp.gate.weight"]), values(g, "blk.1.ffn_gate_inp.weight"));
  EXPECT_EQ(hf.tensors[L1 + "mlp.shared_expert_gate.weight"].shape, (std::vector<int64_t>{1, d}));
  EXPECT_EQ(values(hf.tensors[L1 + "mlp.shared_expert_gate.weight"]), values(g, "blk.1.ffn_gate_inp_shexp.weight"));
  EXPECT_EQ(values(hf.tensors[L1 + "mlp.shared_expert.down_proj.weight"]), values(g, "blk.1.ffn_down_shexp.weight"));
  EXPECT_EQ(values(hf.tensors[L1 + "self_attn.q_proj.weight"]), values(g, "blk.1.attn_q.weight"));
}

TEST(HybridHf, FolderHoldsTransformersLayoutOfTheGgufTensors) {
  check_layout(4);
  check_layout(6);
}

// HF -> engine gives back the GGUF's tensors: bit for bit, but for A = -exp(log(-A)) (within float rounding); both
// families, a folder of each written by the other's tools.
TEST(HybridHf, FolderReadsBackToTheGgufTensors) {
  for (const char* shape : {"qwen3.5-0.8b", "qwen3.5-35b-a3b"}) {
    const std::string dir = testing::scratch_dir();
    SynthModel m = small(shape, 4);
    ASSERT_TRUE(write_model("gguf", dir + "/m.gguf", m.config, m.weights, {}).ok());
    auto gguf = load_gguf_model(dir + "/m.gguf");
    ASSERT_TRUE(gguf.ok());
    ASSERT_TRUE(write_model("safetensors", dir + "/hf", gguf->config, gguf->weights, {}).ok());
    auto hf = load_hf_model(dir + "/hf");
    ASSERT_TRUE(hf.ok()) << hf.status().to_string();
    const ModelConfig& c = hf->config;
    EXPECT_EQ(c.arch, m.config.arch);
    for (int l = 0; l < c.n_layers; ++l) EXPECT_EQ(c.layer_kind(l), m.config.layer_kind(l)) << shape << " " << l;
    EXPECT_EQ(c.rope_dims, m.config.rope_dims);
    EXPECT_EQ(c.rope_sections, m.config.rope_sections);
    EXPECT_EQ(c.rope_theta, m.config.rope_theta);
    EXPECT_EQ(c.hidden_dim, m.config.hidden_dim);
    EXPECT_EQ(c.tied_embeddings, m.config.tied_embeddings);
    EXPECT_EQ(c.moe.shared_expert_hidden_dim, m.config.moe.shared_expert_hidden_dim);
    EXPECT_EQ(c.moe.normalize_weights, m.config.moe.normalize_weights);
    EXPECT_EQ(hf->weights.tensors().size(), gguf->weights.tensors().size()) << shape;
    for (const WeightTensor& t : gguf->weights.tensors()) {
      const WeightTensor* r = hf->weights.find(t.name);
      ASSERT_NE(r, nullptr) << shape << " " << t.name;
      EXPECT_EQ(r->shape, t.shape) << t.name;
      ASSERT_EQ(r->dtype, t.dtype) << t.name;
      if (t.name.ends_with(".ssm_a")) {
        std::vector<float> x = values(gguf->weights, t.name), y = values(hf->weights, t.name);
        for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], 1e-6f * std::fabs(x[i])) << t.name;
      } else {
        ASSERT_EQ(r->bytes, t.bytes) << t.name;
        EXPECT_TRUE(std::equal(t.data, t.data + t.bytes, r->data)) << shape << " " << t.name;
      }
    }
  }
}

// What Qwen3_5MoeForConditionalGeneration saves: the text config nested, tensors under model.language_model., the
// experts one matrix per expert in older exports, plus a vision tower and mtp.* blocks, which are skipped.
TEST(HybridHf, ConditionalGenerationLayoutLoadsTheSameWeights) {
  const std::string dir = testing::scratch_dir();
  SynthModel m = small("qwen3.5-35b-a3b", 2);
  ASSERT_TRUE(write_model("safetensors", dir + "/plain", m.config, m.weights, {}).ok());
  Folder plain = read_folder(dir + "/plain");
  std::vector<SafetensorsTensor> out;
  std::vector<std::vector<uint8_t>> keep;
  for (auto& [name, t] : plain.tensors) {
    SafetensorsTensor u = t;
    if (name.ends_with("mlp.experts.gate_up_proj")) {  // as per-expert gate_proj / up_proj matrices
      const std::string_view suffix = "experts.gate_up_proj";
      const std::string base = name.substr(6, name.size() - 6 - suffix.size());  // "layers.N.mlp."
      const size_t half = t.bytes / 8 / 2;
      for (int x = 0; x < 8; ++x)
        for (int part = 0; part < 2; ++part)
          out.push_back(
              {fmt::format("model.language_model.{}experts.{}.{}_proj.weight", base, x, part == 0 ? "gate" : "up"),
               t.dtype,
               {t.shape[1] / 2, t.shape[2]},
               t.data + (2 * x + part) * half,
               half});
      continue;
    }
    if (name.starts_with("model.")) u.name = "model.language_model." + name.substr(6);
    out.push_back(u);
  }
  keep.push_back(std::vector<uint8_t>(16 * 4, 0));
  out.push_back({"mtp.layers.0.input_layernorm.weight", DType::kF32, {16}, keep.back().data(), 64});
  out.push_back({"mtp.fc.weight", DType::kF32, {4, 4}, keep.back().data(), 64});
  out.push_back({"model.visual.blocks.0.norm1.weight", DType::kF32, {16}, keep.back().data(), 64});
  std::filesystem::create_directories(dir + "/vl");
  ASSERT_TRUE(write_safetensors(dir + "/vl/model.safetensors", out).ok());
  Json text = plain.config;
  text.erase("architectures");
  text["mtp_num_hidden_layers"] = 1;
  Json cfg = {{"architectures", {"Qwen3_5MoeForConditionalGeneration"}},
              {"model_type", "qwen3_5_moe"},
              {"tie_word_embeddings", false},
              {"text_config", text},
              {"vision_config", {{"depth", 1}}}};
  const std::string cfg_text = cfg.dump();
  ASSERT_TRUE(
      write_file_atomic(dir + "/vl/config.json", {reinterpret_cast<const uint8_t*>(cfg_text.data()), cfg_text.size()})
          .ok());
  auto a = load_hf_model(dir + "/plain");
  auto b = load_hf_model(dir + "/vl");
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b->config.n_layers, 2);
  ASSERT_EQ(a->weights.tensors().size(), b->weights.tensors().size());
  for (const WeightTensor& t : a->weights.tensors()) {
    const WeightTensor* r = b->weights.find(t.name);
    ASSERT_NE(r, nullptr) << t.name;
    EXPECT_EQ(r->shape, t.shape) << t.name;
    ASSERT_EQ(r->bytes, t.bytes) << t.name;
    EXPECT_TRUE(std::equal(t.data, t.data + t.bytes, r->data)) << t.name;
  }
}

// Bad configs and tensors: one error naming what is wrong.
TEST(HybridHf, BadConfigsAndTensorsAreRefusedByName) {
  const std::string dir = testing::scratch_dir();
  SynthModel m = small("qwen3.5-35b-a3b", 3);
  ASSERT_TRUE(write_model("safetensors", dir + "/hf", m.config, m.weights, {}).ok());
  const Json good = Json::parse(*read_file(dir + "/hf/config.json"));
  auto refused = [&](const std::function<void(Json&)>& edit, const std::string& needle, bool load = false) {
    Json cfg = good;
    edit(cfg);
    const std::string text = cfg.dump();
    Status s;
    if (load) {
      std::filesystem::copy(
          dir + "/hf", dir + "/bad",
          std::filesystem::copy_options::overwrite_existing | std::filesystem::copy_options::recursive);
      EXPECT_TRUE(
          write_file_atomic(dir + "/bad/config.json", {reinterpret_cast<const uint8_t*>(text.data()), text.size()})
              .ok());
      s = load_hf_model(dir + "/bad").status();
    } else {
      s = parse_hf_config(text, "config.json").status();
    }
    EXPECT_FALSE(s.ok()) << needle;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
    EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
  };
  refused([](Json& c) { c.erase("linear_num_value_heads"); }, "\"linear_num_value_heads\" is missing");
  refused([](Json& c) { c.erase("linear_conv_kernel_dim"); }, "\"linear_conv_kernel_dim\" is missing");
  refused([](Json& c) { c["layer_types"][1] = "sliding_attention"; }, "layer_types entry 'sliding_attention'");
  refused([](Json& c) { c["layer_types"].erase(2); }, "layer_types must list one type for each of the 3 layers");
  refused([](Json& c) { c["linear_num_value_heads"] = 3; }, "must be a positive multiple of linear_num_key_heads 2");
  refused([](Json& c) { c["linear_value_head_dim"] = 64; }, "linear_value_head_dim 64 differs");
  refused([](Json& c) { c["rope_parameters"]["rope_type"] = "yarn"; }, "rope_type 'yarn'");
  refused([](Json& c) { c["norm_topk_prob"] = false; }, "norm_topk_prob false");
  refused([](Json& c) { c.erase("shared_expert_intermediate_size"); },
          "\"shared_expert_intermediate_size\" is missing");
  refused([](Json& c) { c["tie_word_embeddings"] = "yes"; }, "\"tie_word_embeddings\" is not true or false");
  // Configs that parse but disagree with the tensors.
  refused([](Json& c) { c["linear_num_value_heads"] = 2; },
          "tensor model.layers.0.linear_attn.in_proj_qkv.weight has shape [256, 64]", true);
  refused(
      [](Json& c) {
        c["layer_types"] = {"full_attention", "linear_attention", "linear_attention"};
      },
      "is not part of this Qwen3.5 text model", true);
  refused([](Json& c) { c["moe_intermediate_size"] = 64; }, "model.layers.0.mlp.experts.gate_up_proj has shape", true);
}

}  // namespace
}  // namespace tessera::model
