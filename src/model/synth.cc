#include "model/synth.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "base/check.h"
#include "base/quant.h"
#include "base/rng.h"

namespace tessera::model {
namespace {

ModelConfig make_shape(int dim, int hidden, int layers, int heads, int kv_heads, int vocab, int seq) {
  ModelConfig c;
  c.dim = dim;
  c.hidden_dim = hidden;
  c.n_layers = layers;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.vocab_size = vocab;
  c.max_seq_len = seq;
  c.head_dim = dim / heads;
  return c;
}

}  // namespace

std::vector<std::string> synth_shape_names() {
  return {"tiny",         "stories15M",  "stories110M",  "qwen2.5-0.5b",    "llama2-7b",
          "llama3.2-1b",  "llama3.1-8b", "mistral-7b",   "smollm2-135m",    "qwen3-0.6b",
          "gemma2-2b",    "gemma3-1b",   "phi3-mini",    "phi3-mini-128k",  "qwen3-30b-a3b",
          "mixtral-8x7b", "gpt-oss-20b", "qwen3.5-0.8b", "qwen3.5-35b-a3b", "qwen3-embedding-0.6b",
          "bge-small",    "bert-base"};
}

namespace {

// The published configs of each family's models (their config.json values).
Result<ModelConfig> family_shape(const std::string& name) {
  ModelConfig c;
  if (name == "llama2-7b") {
    c = make_shape(4096, 11008, 32, 32, 32, 32000, 4096);
    c.tied_embeddings = false;
  } else if (name == "llama3.2-1b" || name == "llama3.1-8b") {
    c = name == "llama3.2-1b" ? make_shape(2048, 8192, 16, 32, 8, 128256, 131072)
                              : make_shape(4096, 14336, 32, 32, 8, 128256, 131072);
    c.rope_theta = 500000.0f;
    c.tied_embeddings = name == "llama3.2-1b";
    c.rope_scaling = {RopeScalingType::kLlama3, name == "llama3.2-1b" ? 32.0f : 8.0f, 8192, 1.0f, 4.0f};
  } else if (name == "mistral-7b") {  // v0.3: no sliding window, vocabulary of 32768
    c = make_shape(4096, 14336, 32, 32, 8, 32768, 32768);
    c.rope_theta = 1000000.0f;
    c.tied_embeddings = false;
  } else if (name == "smollm2-135m") {
    c = make_shape(576, 1536, 30, 9, 3, 49152, 8192);
    c.rope_theta = 100000.0f;
  } else if (name == "qwen3-0.6b" || name == "qwen3-embedding-0.6b") {
    c = name == "qwen3-0.6b" ? make_shape(1024, 3072, 28, 16, 8, 151936, 40960)
                             : make_shape(1024, 3072, 28, 16, 8, 151669, 32768);
    c.arch = "qwen3";
    c.head_dim = 128;
    c.rope_theta = 1000000.0f;
    c.norm_eps = 1e-6f;
  } else if (name == "bge-small" || name == "bert-base") {
    c = name == "bge-small" ? make_shape(384, 1536, 12, 12, 12, 30522, 512)
                            : make_shape(768, 3072, 12, 12, 12, 30522, 512);
    c.arch = "bert";
    c.norm_eps = 1e-12f;
    c.n_token_types = 2;
  } else if (name == "gemma2-2b") {
    c = make_shape(2304, 9216, 26, 8, 4, 256000, 8192);
    c.arch = "gemma2";
    c.head_dim = 256;
    c.norm_eps = 1e-6f;
    c.attn_softcap = 50.0f;
    c.final_softcap = 30.0f;
    c.sliding_window = 4096;
  } else if (name == "gemma3-1b") {
    c = make_shape(1152, 6912, 26, 4, 1, 262144, 32768);
    c.arch = "gemma3";
    c.head_dim = 256;
    c.norm_eps = 1e-6f;
    c.rope_theta = 1000000.0f;
    c.rope_theta_sliding = 10000.0f;
    c.sliding_window = 512;
  } else if (name == "phi3-mini" || name == "phi3-mini-128k") {
    c = make_shape(3072, 8192, 32, 32, 32, 32064, name == "phi3-mini" ? 4096 : 131072);
    c.arch = "phi3";
    c.tied_embeddings = false;
    c.sliding_window = name == "phi3-mini" ? 2047 : 262144;
    if (name == "phi3-mini-128k") {
      const float factor = 131072.0f / 4096.0f;
      c.rope_scaling.type = RopeScalingType::kLongrope;
      c.rope_scaling.original_context = 4096;
      c.rope_scaling.factor = factor;
      c.rope_scaling.mscale = std::sqrt(1.0f + std::log(factor) / std::log(4096.0f));
    }
  } else if (name == "qwen3-30b-a3b") {
    // Qwen3-30B-A3B: 128 experts of 768, 8 per token, renormalised (norm_topk_prob true).
    c = make_shape(2048, 6144, 48, 32, 4, 151936, 40960);
    c.arch = "qwen3moe";
    c.head_dim = 128;
    c.rope_theta = 1000000.0f;
    c.norm_eps = 1e-6f;
    c.tied_embeddings = false;
    c.moe = {128, 8, 768, ExpertGating::kSoftmax, true, 1.0f};
  } else if (name == "mixtral-8x7b") {
    // Mixtral-8x7B (v0.1): Mistral 7B's attention, 8 experts of 14336, 2 per token.
    c = make_shape(4096, 14336, 32, 32, 8, 32000, 32768);
    c.rope_theta = 1000000.0f;
    c.tied_embeddings = false;
    c.moe = {8, 2, 14336, ExpertGating::kSoftmax, true, 1.0f};
  } else if (name == "gpt-oss-20b") {
    // gpt-oss-20b: 32 experts of 2880, 4 per token; 64 heads of 64 (q 4096 wide on a 2880 residual), 8 kv heads;
    // every other layer slides over 128 positions; YaRN x32 from 4096.
    c = make_shape(2880, 2880, 24, 64, 8, 201088, 131072);
    c.arch = "gpt-oss";
    c.head_dim = 64;
    c.rope_theta = 150000.0f;
    c.tied_embeddings = false;
    c.sliding_window = 128;
    c.rope_scaling.type = RopeScalingType::kYarn;
    c.rope_scaling.factor = 32.0f;
    c.rope_scaling.original_context = 4096;
    c.rope_scaling.beta_fast = 32.0f;
    c.rope_scaling.beta_slow = 1.0f;
    c.rope_scaling.mscale = 1.0f + 0.1f * std::log(32.0f);
    c.moe = {32, 4, 2880, ExpertGating::kSoftmaxWeight, false, 1.0f, 7.0f};
  } else if (name == "qwen3.5-0.8b" || name == "qwen3.5-35b-a3b") {
    // Qwen3.5-0.8B and Qwen3.5-35B-A3B (text): three gated delta-net layers then one full-attention layer (heads
    // of 256 with an output gate, a quarter of each rotated, M-RoPE sections 11/11/10); the linear layers have 16
    // key heads of 128 and 16 (35B-A3B: 32) value heads; 35B-A3B's feed-forward is 256 experts of 512, 8 per token,
    // plus a shared expert of 512.
    const bool moe = name == "qwen3.5-35b-a3b";
    c = moe ? make_shape(2048, 512, 40, 16, 2, 248320, 262144) : make_shape(1024, 3584, 24, 8, 2, 248320, 262144);
    c.arch = moe ? "qwen35moe" : "qwen35";
    c.head_dim = 256;
    c.rope_theta = 10000000.0f;
    c.norm_eps = 1e-6f;
    c.tied_embeddings = !moe;
    c.rope_dims = 64;
    c.rope_sections = {11, 11, 10, 0};
    c.linear = {4, 16, moe ? 32 : 16, 128};
    if (moe) c.moe = {256, 8, 512, ExpertGating::kSoftmax, true, 1.0f, 0.0f, 512};
  } else {
    return invalid_argument(
        fmt::format("unknown shape '{}'; known shapes: {}", name, fmt::join(synth_shape_names(), ", ")));
  }
  const ModelConfig stated = c;
  TS_RETURN_IF_ERROR(apply_arch_features(c));
  if (stated.moe.enabled()) {
    c.moe = stated.moe;
    c.set_all_ffn(FfnKind::kMoe);
  }
  if (c.linear.enabled()) {  // three linear-attention layers, then a full one
    const FfnKind ffn = c.moe.enabled() ? FfnKind::kMoe : FfnKind::kDense;
    c.layer_kinds = {{AttentionKind::kLinear, ffn},
                     {AttentionKind::kLinear, ffn},
                     {AttentionKind::kLinear, ffn},
                     {AttentionKind::kFull, ffn}};
  }
  if (c.arch == "gemma2" || c.arch == "gemma3") c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  (void)stated;
  if (c.sliding_window >= c.max_seq_len) c.sliding_window = 0;
  return c;
}

}  // namespace

EmbeddingSpec synth_embedding(const std::string& name) {
  EmbeddingSpec e;
  if (name == "qwen3-embedding-0.6b") {
    e.pooling = PoolingType::kLast;
    e.matryoshka = true;
  } else if (name == "bge-small") {
    e.pooling = PoolingType::kCls;
  } else if (name == "bert-base") {
    e.pooling = PoolingType::kMean;
  }
  return e;
}

Result<ModelConfig> synth_shape(const std::string& name) {
  if (name == "tiny") return make_shape(64, 172, 5, 8, 4, 512, 512);
  if (name == "stories15M") return make_shape(288, 768, 6, 6, 6, 32000, 256);
  if (name == "stories110M") return make_shape(768, 2048, 12, 12, 12, 32000, 1024);
  if (name == "qwen2.5-0.5b") {
    // Qwen2.5-0.5B's published config: q/k/v biases, tied embeddings, rotate-half rotary, theta 1e6.
    ModelConfig c = make_shape(896, 4864, 24, 14, 2, 151936, 32768);
    c.arch = "qwen2";
    c.rope_theta = 1000000.0f;
    c.norm_eps = 1e-6f;
    c.rope_layout = RopeLayout::kHalf;
    c.tied_embeddings = true;
    return c;
  }
  return family_shape(name);
}

Result<ModelConfig> synth_shape_small(const std::string& name) {
  TS_ASSIGN_OR_RETURN(ModelConfig c, synth_shape(name));
  // Small enough to run in milliseconds on the ref backend, big enough for grouped-query attention and for
  // every block type (q8_0/q4_0 need rows of 32).
  const int group = c.n_heads / c.n_kv_heads > 1 ? 2 : 1;
  c.n_kv_heads = 2;
  c.n_heads = 2 * group;
  c.head_dim = 32;
  c.dim = 64;
  c.hidden_dim = 128;
  c.vocab_size = 512;
  c.max_seq_len = std::min(c.max_seq_len, 512);
  c.n_layers = std::min(c.n_layers, 6);
  if (c.moe.enabled()) {
    // 8 experts, 2 per token (Mixtral's ratio), as wide as the dense width: every routing choice matters.
    c.moe.n_experts = 8;
    c.moe.n_experts_used = 2;
    c.moe.expert_hidden_dim = c.hidden_dim;
    if (c.moe.shared_expert_hidden_dim > 0) c.moe.shared_expert_hidden_dim = c.hidden_dim;
    if (!c.linear.enabled()) c.set_all_ffn(FfnKind::kMoe);
  }
  if (c.linear.enabled()) {
    // Key heads of 32, value heads as many (or, for 35B-A3B's ratio, twice as many); a quarter of each attention
    // head rotated, in M-RoPE sections that cover it as Qwen3.5's do.
    const int ratio = c.linear.v_heads / c.linear.k_heads;
    c.linear = {4, 2, 2 * ratio, 32};
    c.rope_dims = 8;
    c.rope_sections = {2, 1, 1, 0};
    // Every other layer full attention (GGUF full_attention_interval 2), so that 2 layers hold both kinds.
    c.layer_kinds = {c.layer_kinds[0], c.layer_kinds[3]};
  }
  if (c.embedding_scale > 0.0f) c.embedding_scale = std::sqrt(static_cast<float>(c.dim));
  if (c.attn_scale > 0.0f) c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  if (c.sliding_window > 0) c.sliding_window = 8;  // short prompts already cross it
  if (c.rope_scaling.type != RopeScalingType::kNone) {
    // Keep the scaling active at the small context: the original context shrinks with it.
    c.rope_scaling.original_context = c.rope_scaling.type == RopeScalingType::kLongrope ? 64 : 128;
  }
  return c;
}

Status resize_synth_shape(ModelConfig& c, int dim, int hidden_dim, int sliding_window) {
  if (dim > 0) {
    const int group = c.n_kv_heads > 0 ? c.n_heads / c.n_kv_heads : 1;
    if (dim % c.head_dim != 0 || (dim / c.head_dim) % group != 0)
      return invalid_argument(fmt::format("--dim {} is not a multiple of head_dim {} x {} query heads per kv head", dim,
                                          c.head_dim, group));
    c.dim = dim;
    c.n_heads = dim / c.head_dim;
    c.n_kv_heads = c.n_heads / group;
    if (c.embedding_scale > 0.0f) c.embedding_scale = std::sqrt(static_cast<float>(c.dim));
  }
  if (hidden_dim > 0) c.hidden_dim = hidden_dim;
  if (hidden_dim > 0 && c.moe.enabled()) c.moe.expert_hidden_dim = hidden_dim;  // the experts are the FFN
  if (hidden_dim > 0 && c.moe.shared_expert_hidden_dim > 0) c.moe.shared_expert_hidden_dim = hidden_dim;
  if (sliding_window >= 0) c.sliding_window = sliding_window;
  return c.validate();
}

namespace {

constexpr double kWeightStd = 0.02;  // synthesize_weights' N(0, 0.02)

// sqrt(E[act(g)^2]) for g ~ N(0, s^2): the rms of the gated MLP's activation, by quadrature over +-8 s.
double activation_rms(double s, bool gelu) {
  auto act = [gelu](double x) {
    if (gelu) return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    return x / (1.0 + std::exp(-x));
  };
  constexpr int kSteps = 4000;
  double sum = 0, weight = 0;
  for (int i = 0; i <= kSteps; ++i) {
    const double z = -8.0 + 16.0 * i / kSteps;
    const double p = std::exp(-0.5 * z * z);
    sum += p * act(s * z) * act(s * z);
    weight += p;
  }
  return std::sqrt(sum / weight);
}

}  // namespace

double decisive_write_scale(const ModelConfig& c, double lead) {
  if (lead <= 0) return 1.0;
  const double d = c.dim, sd = std::sqrt(d);
  const double emb = kWeightStd * sd * (c.embedding_scale > 0 ? c.embedding_scale : 1.0);  // |e|
  // One layer's two writes. Each projection of an rms-normalised row has entries of std s = 0.02 sqrt(dim).
  // Attention averages value rows (taken as half their norm); the MLP multiplies act(gate) by up. With
  // post-norms each write is rms-normalised itself: norm sqrt(dim) times the norm weights (about 1).
  const double s = kWeightStd * sd;
  double attn = 0, mlp = 0;
  if (c.post_norms) {
    attn = mlp = sd;
  } else {
    attn = sd * kWeightStd * std::sqrt(static_cast<double>(c.q_dim())) * s * 0.5;
    mlp = sd * kWeightStd * std::sqrt(static_cast<double>(c.hidden_dim)) * activation_rms(s, c.gelu_mlp) * s;
  }
  const double writes = std::sqrt(c.n_layers * (attn * attn + mlp * mlp));  // random directions add in quadrature
  // The token leads by sqrt(dim) |e| / |h| deviations; |h|^2 = |e|^2 + (scale * writes)^2.
  const double h = sd * emb / lead;
  if (h <= emb) return 1e-3;  // even without writes the lead is below `lead`: keep them small
  return std::min(1.0, std::sqrt(h * h - emb * emb) / writes);
}

SynthModel synthesize_weights(const ModelConfig& c, uint64_t seed, const SynthWeightOptions& options) {
  TS_CHECK(c.validate().ok());
  struct Spec {
    std::string name;
    std::vector<int64_t> shape;
    bool norm;
  };
  std::vector<Spec> specs;
  int64_t d = c.dim, h = c.hidden_dim, q = c.q_dim(), kv = c.kv_dim();
  specs.push_back({"token_embd.weight", {c.vocab_size, d}, false});
  if (c.arch == "bert") {
    specs.push_back({"position_embd.weight", {c.max_seq_len, d}, false});
    specs.push_back({"token_types.weight", {std::max(1, c.n_token_types), d}, false});
    specs.push_back({"token_embd_norm.weight", {d}, true});
    specs.push_back({"token_embd_norm.bias", {d}, false});
    for (int l = 0; l < c.n_layers; ++l) {
      for (const char* m : {"attn_q", "attn_k", "attn_v", "attn_output"}) {
        specs.push_back({layer_tensor_name(l, std::string(m) + ".weight"), {d, d}, false});
        specs.push_back({layer_tensor_name(l, std::string(m) + ".bias"), {d}, false});
      }
      specs.push_back({layer_tensor_name(l, "attn_output_norm.weight"), {d}, true});
      specs.push_back({layer_tensor_name(l, "attn_output_norm.bias"), {d}, false});
      specs.push_back({layer_tensor_name(l, "ffn_up.weight"), {h, d}, false});
      specs.push_back({layer_tensor_name(l, "ffn_up.bias"), {h}, false});
      specs.push_back({layer_tensor_name(l, "ffn_down.weight"), {d, h}, false});
      specs.push_back({layer_tensor_name(l, "ffn_down.bias"), {d}, false});
      specs.push_back({layer_tensor_name(l, "layer_output_norm.weight"), {d}, true});
      specs.push_back({layer_tensor_name(l, "layer_output_norm.bias"), {d}, false});
    }
  }
  const LinearAttentionConfig& la = c.linear;
  for (int l = 0; l < c.n_layers && c.arch != "bert"; ++l) {
    specs.push_back({layer_tensor_name(l, "attn_norm.weight"), {d}, true});
    if (c.layer_kind(l).attention == AttentionKind::kLinear) {
      const int64_t ch = la.conv_channels(), vd = la.value_dim(), hv = la.v_heads;
      specs.push_back({layer_tensor_name(l, "attn_qkv.weight"), {ch, d}, false});
      specs.push_back({layer_tensor_name(l, "attn_gate.weight"), {vd, d}, false});
      specs.push_back({layer_tensor_name(l, "ssm_conv1d.weight"), {ch, la.conv_kernel}, false});
      specs.push_back({layer_tensor_name(l, "ssm_dt.bias"), {hv}, false});
      specs.push_back({layer_tensor_name(l, "ssm_a"), {hv}, false});
      specs.push_back({layer_tensor_name(l, "ssm_beta.weight"), {hv, d}, false});
      specs.push_back({layer_tensor_name(l, "ssm_alpha.weight"), {hv, d}, false});
      specs.push_back({layer_tensor_name(l, "ssm_norm.weight"), {la.head_dim}, true});
      specs.push_back({layer_tensor_name(l, "ssm_out.weight"), {d, vd}, false});
    } else {
      specs.push_back({layer_tensor_name(l, "attn_q.weight"), {c.attn_output_gate ? 2 * q : q, d}, false});
      specs.push_back({layer_tensor_name(l, "attn_k.weight"), {kv, d}, false});
      specs.push_back({layer_tensor_name(l, "attn_v.weight"), {kv, d}, false});
      if (c.arch == "qwen2" || c.arch == "gpt-oss") {
        specs.push_back({layer_tensor_name(l, "attn_q.bias"), {q}, false});
        specs.push_back({layer_tensor_name(l, "attn_k.bias"), {kv}, false});
        specs.push_back({layer_tensor_name(l, "attn_v.bias"), {kv}, false});
      }
      if (c.qk_norm) {
        specs.push_back({layer_tensor_name(l, "attn_q_norm.weight"), {c.head_dim}, true});
        specs.push_back({layer_tensor_name(l, "attn_k_norm.weight"), {c.head_dim}, true});
      }
      specs.push_back({layer_tensor_name(l, "attn_output.weight"), {d, q}, false});
      if (c.arch == "gpt-oss") specs.push_back({layer_tensor_name(l, "attn_output.bias"), {d}, false});
      if (c.attn_sinks) specs.push_back({layer_tensor_name(l, "attn_sinks.weight"), {c.n_heads}, false});
    }
    if (c.post_norms) specs.push_back({layer_tensor_name(l, "post_attention_norm.weight"), {d}, true});
    specs.push_back({layer_tensor_name(l, "ffn_norm.weight"), {d}, true});
    if (c.layer_kind(l).ffn == FfnKind::kMoe) {
      const int64_t e = c.moe.n_experts, f = c.moe.expert_hidden_dim;
      specs.push_back({layer_tensor_name(l, "ffn_gate_inp.weight"), {e, d}, false});
      specs.push_back({layer_tensor_name(l, "ffn_gate_exps.weight"), {e, f, d}, false});
      specs.push_back({layer_tensor_name(l, "ffn_down_exps.weight"), {e, d, f}, false});
      specs.push_back({layer_tensor_name(l, "ffn_up_exps.weight"), {e, f, d}, false});
      if (c.moe.shared_expert_hidden_dim > 0) {
        const int64_t sh = c.moe.shared_expert_hidden_dim;
        specs.push_back({layer_tensor_name(l, "ffn_gate_inp_shexp.weight"), {d}, false});
        specs.push_back({layer_tensor_name(l, "ffn_gate_shexp.weight"), {sh, d}, false});
        specs.push_back({layer_tensor_name(l, "ffn_down_shexp.weight"), {d, sh}, false});
        specs.push_back({layer_tensor_name(l, "ffn_up_shexp.weight"), {sh, d}, false});
      }
      if (c.arch == "gpt-oss") {  // biases on the router and on every expert
        specs.push_back({layer_tensor_name(l, "ffn_gate_inp.bias"), {e}, false});
        specs.push_back({layer_tensor_name(l, "ffn_gate_exps.bias"), {e, f}, false});
        specs.push_back({layer_tensor_name(l, "ffn_down_exps.bias"), {e, d}, false});
        specs.push_back({layer_tensor_name(l, "ffn_up_exps.bias"), {e, f}, false});
      }
    } else {
      specs.push_back({layer_tensor_name(l, "ffn_gate.weight"), {h, d}, false});
      specs.push_back({layer_tensor_name(l, "ffn_down.weight"), {d, h}, false});
      specs.push_back({layer_tensor_name(l, "ffn_up.weight"), {h, d}, false});
    }
    if (c.post_norms) specs.push_back({layer_tensor_name(l, "post_ffw_norm.weight"), {d}, true});
  }
  if (c.rope_scaling.type == RopeScalingType::kLongrope) {
    specs.push_back({"rope_factors_long.weight", {c.head_dim / 2}, false});
    specs.push_back({"rope_factors_short.weight", {c.head_dim / 2}, false});
  }
  if (c.arch != "bert") specs.push_back({"output_norm.weight", {d}, true});
  if (!c.tied_embeddings) specs.push_back({"output.weight", {c.vocab_size, d}, false});

  // Matrices may be stored as f16/bf16 straight away (half the memory of f32 for the big shapes); every value is
  // drawn in f32 first, so the same seed gives the same model, only rounded.
  const DType half = options.matrix_dtype.value_or(DType::kF32);
  TS_CHECK(half == DType::kF32 || half == DType::kF16 || half == DType::kBF16);
  auto stored_type = [&](const Spec& s) {
    // The router and the convolution stay f32, as llama.cpp's converter keeps them (ggml's ssm_conv takes f32).
    const bool matrix = s.shape.size() >= 2 && s.name.ends_with(".weight") &&
                        !s.name.ends_with("ffn_gate_inp.weight") && !s.name.ends_with("ssm_conv1d.weight");
    return matrix ? half : DType::kF32;
  };
  size_t total = 0;
  for (const Spec& s : specs) {
    size_t n = 1;
    for (int64_t x : s.shape) n *= static_cast<size_t>(x);
    total += dtype_bytes(stored_type(s), n);
  }
  auto storage = std::make_shared<std::vector<uint8_t>>(total);
  Rng rng(seed * 0x9E3779B97F4A7C15ull + 1);
  const double write_scale = decisive_write_scale(c, options.token_lead);
  auto is_write = [&](const std::string& name) {
    if (write_scale >= 1.0) return false;
    auto ends = [&](std::string_view suffix) {
      return name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    return c.post_norms ? ends("post_attention_norm.weight") || ends("post_ffw_norm.weight")
                        : ends("attn_output.weight") || ends("ffn_down.weight");
  };
  SynthModel out{c, ModelWeights(storage)};
  uint8_t* p = storage->data();
  std::vector<float> v, embd;  // one tensor's values; the embedding's, kept for --decisive
  for (const Spec& s : specs) {
    const DType type = stored_type(s);
    WeightTensor t{s.name, type, s.shape, p, 0};
    size_t n = static_cast<size_t>(t.numel());
    v.resize(n);
    if (s.name == "rope_factors_long.weight" || s.name == "rope_factors_short.weight") {
      // Phi-3's shape of factors: 1 for the fastest pairs, growing towards the slowest (long: up to the
      // context factor; short: a few percent), seeded jitter on top.
      const bool is_long = s.name == "rope_factors_long.weight";
      const float top = is_long ? c.rope_scaling.factor : 1.1f;
      for (size_t i = 0; i < n; ++i) {
        const float ramp = static_cast<float>(i) / static_cast<float>(n - 1);
        v[i] = 1.0f + (top - 1.0f) * ramp * ramp + 0.01f * std::fabs(rng.next_normal());
      }
    } else if (s.name.ends_with(".ssm_a")) {
      // -exp(A_log) with A_log around 0 (decays of about 0.4 to 0.9 per token at softplus 1).
      for (size_t i = 0; i < n; ++i) v[i] = -std::exp(0.5f * rng.next_normal());
    } else if (s.name.ends_with(".ssm_dt.bias") || s.name.ends_with("ssm_conv1d.weight")) {
      for (size_t i = 0; i < n; ++i) v[i] = 0.5f * rng.next_normal();
    } else if (s.name.ends_with("attn_sinks.weight")) {
      // Sinks of the size of the attention scores, so that they take a real share of each softmax.
      for (size_t i = 0; i < n; ++i) v[i] = rng.next_normal();
    } else {
      for (size_t i = 0; i < n; ++i) v[i] = (s.norm ? 1.0f : 0.0f) + 0.02f * rng.next_normal();
    }
    if (is_write(s.name)) {
      for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(v[i] * write_scale);
    }
    if (options.decisive && s.name == "token_embd.weight") embd = v;
    if (options.decisive && s.name == "output.weight") {
      TS_CHECK(embd.size() == n);
      const float norm = 1.0f / std::sqrt(1.25f);  // keeps the rows' scale
      for (size_t i = 0; i < n; ++i) v[i] = (embd[i] + 0.5f * v[i]) * norm;
    }
    const bool classifier = s.name == "output.weight" || (s.name == "token_embd.weight" && c.tied_embeddings);
    if (options.rare_byte_tokens && classifier) {
      constexpr int64_t kFirstByte = 3, kBytes = 256;
      for (int64_t row = kFirstByte; row < std::min<int64_t>(kFirstByte + kBytes, s.shape[0]); ++row)
        for (int64_t k = 0; k < s.shape[1]; ++k) v[static_cast<size_t>(row * s.shape[1] + k)] *= 0.1f;
    }
    t.bytes = dtype_bytes(type, n);
    TS_CHECK(quantize(v, type, p).ok());
    p += t.bytes;
    out.weights.add(std::move(t));
  }
  return out;
}

std::unique_ptr<Llama2cTokenizer> synthesize_tokenizer(int vocab_size, uint64_t seed, std::string_view arch) {
  std::vector<std::string> pieces = {"<unk>", "\n<s>\n", "\n</s>\n"};
  for (int b = 0; b < 256; ++b) pieces.push_back(fmt::format("<0x{:02X}>", b));
  std::set<std::string> seen(pieces.begin(), pieces.end());
  std::vector<std::string> text_pieces;
  for (char ch = ' '; ch <= '~' && static_cast<int>(pieces.size()) < vocab_size; ++ch) {
    std::string s(1, ch);
    pieces.push_back(s);
    seen.insert(s);
    text_pieces.push_back(s);
  }
  Rng rng(seed ^ 0xA5A5A5A5ull);
  int guard = 0;
  while (static_cast<int>(pieces.size()) < vocab_size && guard++ < vocab_size * 64) {
    // Joining two existing pieces keeps every piece reachable by merges, as in a trained BPE vocabulary.
    const std::string& a = text_pieces[rng.next_u32() % text_pieces.size()];
    const std::string& b = text_pieces[rng.next_u32() % text_pieces.size()];
    std::string s = a + b;
    if (s.size() > 16 || !seen.insert(s).second) continue;
    pieces.push_back(s);
    text_pieces.push_back(s);
  }
  for (int i = 0; static_cast<int>(pieces.size()) < vocab_size; ++i) pieces.push_back(fmt::format("<extra_{}>", i));
  if (arch == "phi3") {
    static const char* const kPhi3Added[] = {"<|endoftext|>",    "<|assistant|>",    "<|placeholder1|>",
                                             "<|placeholder2|>", "<|placeholder3|>", "<|placeholder4|>",
                                             "<|system|>",       "<|end|>",          "<|placeholder5|>",
                                             "<|placeholder6|>", "<|user|>"};
    const size_t n = std::size(kPhi3Added);
    TS_CHECK(pieces.size() >= n + 259);
    for (size_t i = 0; i < n; ++i) pieces[pieces.size() - n + i] = kPhi3Added[i];
  }
  std::vector<float> scores(pieces.size(), 0.0f);
  for (size_t i = 259; i < pieces.size(); ++i) scores[i] = -static_cast<float>(i - 259);
  auto tok = Llama2cTokenizer::from_pieces(std::move(pieces), std::move(scores));
  TS_CHECK(tok.ok());
  return std::move(tok).value();
}

std::unique_ptr<WordPieceTokenizer> synthesize_wordpiece_tokenizer(int vocab_size, uint64_t seed) {
  TS_CHECK(vocab_size >= 200);
  WordPieceSpec spec;
  std::vector<std::string>& t = spec.tokens;
  t = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  spec.special.assign(t.size(), true);
  spec.pad = 0;
  spec.unk = 1;
  spec.cls = 2;
  spec.sep = 3;
  spec.mask = 4;
  std::set<std::string> seen(t.begin(), t.end());
  auto add = [&](std::string s) {
    if (static_cast<int>(t.size()) >= vocab_size || !seen.insert(s).second) return;
    t.push_back(std::move(s));
    spec.special.push_back(false);
  };
  // The normaliser lowercases: no capital letters are needed.
  for (char ch = '!'; ch <= '~'; ++ch)
    if (ch < 'A' || ch > 'Z') add(std::string(1, ch));
  for (char ch = 'a'; ch <= 'z'; ++ch) add("##" + std::string(1, ch));
  for (char ch = '0'; ch <= '9'; ++ch) add("##" + std::string(1, ch));
  Rng rng(seed ^ 0x5EED5EEDull);
  for (int guard = 0; static_cast<int>(t.size()) < vocab_size && guard < vocab_size * 64; ++guard) {
    const int len = 2 + static_cast<int>(rng.next_u32() % 7);
    std::string w;
    for (int i = 0; i < len; ++i) w += static_cast<char>('a' + rng.next_u32() % 26);
    add(rng.next_u32() % 3 == 0 ? "##" + w : w);
  }
  for (int i = 0; static_cast<int>(t.size()) < vocab_size; ++i) add(fmt::format("[unused{}]", i));
  auto tok = WordPieceTokenizer::create(std::move(spec));
  TS_CHECK(tok.ok());
  return std::move(tok).value();
}

}  // namespace tessera::model
