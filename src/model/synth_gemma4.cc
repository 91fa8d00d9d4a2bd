#include "model/synth_gemma4.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <set>

#include <fmt/format.h>

#include "base/quant.h"
#include "base/rng.h"
#include "model/formats/gguf/gguf_file.h"

namespace tessera::model {
namespace {

constexpr std::string_view kMeta = "\xE2\x96\x81";  // U+2581
constexpr int kFirstByteToken = 6;

GgufValue u32_array(GgufType elem, const std::vector<int64_t>& v) {
  GgufValue g;
  g.type = GgufType::kArray;
  g.elem_type = elem;
  g.ints = v;
  return g;
}

std::string blk(int l, const char* what) { return fmt::format("blk.{}.{}", l, what); }

}  // namespace

std::vector<std::string> gemma4_shape_names() { return {"gemma4-e2b", "gemma4-26b-a4b"}; }

bool is_gemma4_shape(const std::string& name) {
  const auto names = gemma4_shape_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

Status Gemma4Shape::validate() const {
  auto in = [](int v, int lo, int hi) { return v >= lo && v <= hi; };
  if (!in(dim, 1, 1 << 16) || !in(n_layers, 1, 1024) || !in(n_heads, 1, 1024) || !in(hidden_dim, 1, 1 << 18) ||
      !in(vocab_size, kFirstByteToken + 256 + 95, 1 << 22) || !in(max_seq_len, 1, 1 << 22))
    return invalid_argument(fmt::format("gemma4 shape {} has a dimension out of range", name));
  for (int kv : {n_kv_heads_swa, n_kv_heads_full})
    if (!in(kv, 1, n_heads) || n_heads % kv != 0)
      return invalid_argument(fmt::format("{} KV heads do not divide {} heads", kv, n_heads));
  for (int hd : {head_dim_swa, head_dim_full})
    if (!in(hd, 2, 1024) || hd % 2 != 0) return invalid_argument(fmt::format("head size {} must be even", hd));
  if (swa_period < 1 || sliding_window < 1) return invalid_argument("gemma4 needs a sliding window and its period");
  if (shared_kv_layers < 0 || shared_kv_layers >= n_layers)
    return invalid_argument(fmt::format("{} KV-sharing layers of {}", shared_kv_layers, n_layers));
  if (n_experts > 0 && (!in(n_experts_used, 1, n_experts) || expert_hidden_dim < 1))
    return invalid_argument("gemma4 experts: used count or width out of range");
  const int rotated = static_cast<int>(static_cast<float>(head_dim_full) * partial_rotary_full / 2.0f);
  if (rotated < 1 || rotated > head_dim_full / 2)
    return invalid_argument(fmt::format("partial rotary factor {} leaves nothing to rotate", partial_rotary_full));
  return ok_status();
}

Result<Gemma4Shape> gemma4_shape(const std::string& name, bool small) {
  Gemma4Shape s;
  s.name = name;
  if (name == "gemma4-e2b") {
    // google/gemma-4-E2B: 35 layers (4 sliding, 1 full), 8 heads, 1 KV head, head sizes 256/512, MLP 6144
    // (12288 in the 20 KV-sharing layers), per-layer embeddings of 256, window 512.
    s.dim = 1536, s.n_layers = 35, s.n_heads = 8, s.n_kv_heads_swa = s.n_kv_heads_full = 1;
    s.head_dim_swa = 256, s.head_dim_full = 512, s.hidden_dim = 6144, s.double_wide_shared = true;
    s.per_layer_dim = 256, s.shared_kv_layers = 20, s.sliding_window = 512, s.swa_period = 5;
    s.vocab_size = 262144, s.max_seq_len = 131072;
  } else if (name == "gemma4-26b-a4b") {
    // google/gemma-4-26B-A4B: 30 layers (5 sliding, 1 full), 16 heads, 8 KV heads (2 in full layers, V = K),
    // an MLP of 2112 beside 128 experts of 704 (8 per token), window 1024.
    s.dim = 2816, s.n_layers = 30, s.n_heads = 16, s.n_kv_heads_swa = 8, s.n_kv_heads_full = 2;
    s.head_dim_swa = 256, s.head_dim_full = 512, s.hidden_dim = 2112, s.full_k_eq_v = true;
    s.sliding_window = 1024, s.swa_period = 6, s.vocab_size = 262144, s.max_seq_len = 262144;
    s.n_experts = 128, s.n_experts_used = 8, s.expert_hidden_dim = 704;
  } else {
    return invalid_argument(
        fmt::format("unknown gemma4 shape '{}' (known: {})", name, fmt::join(gemma4_shape_names(), ", ")));
  }
  s.shared_kv_share = static_cast<double>(s.shared_kv_layers) / s.n_layers;
  if (small) {
    const int layers = std::min(s.n_layers, 6);
    const int shared = s.shared_kv_layers;
    s.dim = 64, s.n_heads = 2, s.head_dim_swa = 32, s.head_dim_full = 64, s.hidden_dim = 128;
    s.n_kv_heads_swa = std::min(s.n_kv_heads_swa, 2), s.n_kv_heads_full = 1;
    if (s.per_layer_dim > 0) s.per_layer_dim = 16;
    s.sliding_window = 8, s.vocab_size = 512, s.max_seq_len = 512;
    if (s.n_experts > 0) s.n_experts = 8, s.n_experts_used = 2, s.expert_hidden_dim = 128;
    s.shared_kv_layers = shared;
    TS_RETURN_IF_ERROR(resize_gemma4_shape(s, layers, 0, 0, -1));
  }
  TS_RETURN_IF_ERROR(s.validate());
  return s;
}

Status resize_gemma4_shape(Gemma4Shape& s, int layers, int dim, int hidden_dim, int sliding_window) {
  if (layers > 0) {
    // Keep the published share of KV-sharing layers, but never share away the first full period.
    const int shared = static_cast<int>(std::lround(s.shared_kv_share * layers));
    s.n_layers = layers;
    s.shared_kv_layers = std::clamp(shared, 0, std::max(0, layers - s.swa_period));
    const int first = (layers - s.shared_kv_layers + s.swa_period - 1) / s.swa_period * s.swa_period;
    s.shared_kv_layers = std::max(0, layers - first);
  }
  if (dim > 0) {
    if (dim % s.head_dim_swa != 0)
      return invalid_argument(fmt::format("--dim {} is not a multiple of the head size {}", dim, s.head_dim_swa));
    const int group_swa = s.n_heads / s.n_kv_heads_swa, group_full = s.n_heads / s.n_kv_heads_full;
    s.dim = dim;
    s.n_heads = dim / s.head_dim_swa;
    s.n_kv_heads_swa = std::max(1, s.n_heads / group_swa);
    s.n_kv_heads_full = std::max(1, s.n_heads / group_full);
    if (s.n_heads % s.n_kv_heads_swa != 0 || s.n_heads % s.n_kv_heads_full != 0)
      return invalid_argument(fmt::format("--dim {}: the KV heads do not divide {} heads", dim, s.n_heads));
  }
  if (hidden_dim > 0) {
    s.hidden_dim = hidden_dim;
    if (s.n_experts > 0) s.expert_hidden_dim = hidden_dim;
  }
  if (sliding_window > 0) s.sliding_window = sliding_window;
  if (sliding_window == 0) return invalid_argument("gemma4 layers slide: the window cannot be 0");
  return s.validate();
}

Vocab synthesize_gemma4_vocab(int n, uint64_t seed) {
  Vocab v;
  v.kind = VocabKind::kGemma4Bpe;
  v.pre = "gemma4";
  v.add_bos = true;
  v.add_space_prefix = false;
  v.tokens = {"<pad>", "<eos>", "<bos>", "<unk>", "<|turn>", "<turn|>"};
  v.types = {kTokenControl, kTokenControl, kTokenControl, kTokenUnknown, kTokenControl, kTokenControl};
  v.pad = 0, v.eos = 1, v.bos = 2, v.unk = 3;
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(fmt::format("<0x{:02X}>", b));
    v.types.push_back(kTokenByte);
  }
  std::set<std::string> seen(v.tokens.begin(), v.tokens.end());
  std::vector<std::string> text;
  for (char ch = ' '; ch <= '~' && static_cast<int>(v.tokens.size()) < n; ++ch) {
    std::string s = ch == ' ' ? std::string(kMeta) : std::string(1, ch);
    v.tokens.push_back(s);
    v.types.push_back(kTokenNormal);
    seen.insert(s);
    text.push_back(s);
  }
  Rng rng(seed ^ 0x6E6D6D61ull);
  for (int guard = 0; static_cast<int>(v.tokens.size()) < n && guard < n * 64; ++guard) {
    // Each new piece joins two earlier ones, and its merge is the next in rank: every piece is reachable.
    const std::string& a = text[rng.next_u32() % text.size()];
    const std::string& b = text[rng.next_u32() % text.size()];
    std::string s = a + b;
    if (s.size() > 16 || !seen.insert(s).second) continue;
    v.merges.push_back(a + " " + b);
    v.tokens.push_back(s);
    v.types.push_back(kTokenNormal);
    text.push_back(std::move(s));
  }
  for (int i = 0; static_cast<int>(v.tokens.size()) < n; ++i) {
    v.tokens.push_back(fmt::format("<unused{}>", i));
    v.types.push_back(kTokenUnused);
  }
  v.scores.assign(v.tokens.size(), 0.0f);
  return v;
}

Status write_gemma4_gguf(const Gemma4Shape& s, uint64_t seed, const Gemma4WriteOptions& options,
                         const std::string& path) {
  TS_RETURN_IF_ERROR(s.validate());
  const DType mt = options.matrix_dtype;
  if (mt != DType::kF32 && mt != DType::kF16 && mt != DType::kBF16)
    return invalid_argument("gemma4 synth writes f32, f16 or bf16 matrices (quantize with llama-quantize)");
  const std::string a = "gemma4.";
  std::vector<std::pair<std::string, GgufValue>> kv;
  auto u32 = [&](const std::string& k, int64_t v) { kv.emplace_back(a + k, GgufValue::u32(static_cast<uint32_t>(v))); };
  auto f32 = [&](const std::string& k, float v) { kv.emplace_back(a + k, GgufValue::f32(v)); };
  kv.emplace_back("general.architecture", GgufValue::str("gemma4"));
  kv.emplace_back("general.name", GgufValue::str("synth-" + s.name));
  u32("context_length", s.max_seq_len);
  u32("embedding_length", s.dim);
  u32("block_count", s.n_layers);
  std::vector<int64_t> ff, kvh;
  std::vector<int64_t> swa;
  for (int l = 0; l < s.n_layers; ++l) {
    ff.push_back(s.ffn_width(l));
    kvh.push_back(s.is_sliding(l) ? s.n_kv_heads_swa : s.n_kv_heads_full);
    swa.push_back(s.is_sliding(l) ? 1 : 0);
  }
  // As the converter: arrays only where layers differ.
  if (s.double_wide_shared && s.shared_kv_layers > 0)
    kv.emplace_back(a + "feed_forward_length", u32_array(GgufType::kUint32, ff));
  else
    u32("feed_forward_length", s.hidden_dim);
  u32("attention.head_count", s.n_heads);
  if (s.n_kv_heads_swa != s.n_kv_heads_full)
    kv.emplace_back(a + "attention.head_count_kv", u32_array(GgufType::kUint32, kvh));
  else
    u32("attention.head_count_kv", s.n_kv_heads_swa);
  f32("rope.freq_base", s.rope_theta_full);
  f32("rope.freq_base_swa", s.rope_theta_swa);
  f32("attention.layer_norm_rms_epsilon", s.norm_eps);
  u32("attention.key_length", s.head_dim_full);
  u32("attention.value_length", s.head_dim_full);
  u32("attention.key_length_swa", s.head_dim_swa);
  u32("attention.value_length_swa", s.head_dim_swa);
  u32("rope.dimension_count", s.head_dim_full);
  u32("rope.dimension_count_swa", s.head_dim_swa);
  f32("final_logit_softcapping", s.final_softcap);
  u32("attention.sliding_window", s.sliding_window);
  kv.emplace_back(a + "attention.sliding_window_pattern", u32_array(GgufType::kBool, swa));
  u32("attention.shared_kv_layers", s.shared_kv_layers);
  u32("embedding_length_per_layer_input", s.per_layer_dim);
  if (s.n_experts > 0) {
    u32("expert_count", s.n_experts);
    u32("expert_used_count", s.n_experts_used);
    u32("expert_feed_forward_length", s.expert_hidden_dim);
  }
  const Vocab vocab = synthesize_gemma4_vocab(s.vocab_size, seed);
  kv.emplace_back("tokenizer.ggml.model", GgufValue::str("gemma4"));
  kv.emplace_back("tokenizer.ggml.tokens", GgufValue::string_array(vocab.tokens));
  kv.emplace_back("tokenizer.ggml.scores", GgufValue::f32_array(vocab.scores));
  kv.emplace_back("tokenizer.ggml.token_type", GgufValue::i32_array(vocab.types));
  kv.emplace_back("tokenizer.ggml.merges", GgufValue::string_array(vocab.merges));
  kv.emplace_back("tokenizer.ggml.bos_token_id", GgufValue::u32(static_cast<uint32_t>(vocab.bos)));
  kv.emplace_back("tokenizer.ggml.eos_token_id", GgufValue::u32(static_cast<uint32_t>(vocab.eos)));
  kv.emplace_back("tokenizer.ggml.unknown_token_id", GgufValue::u32(static_cast<uint32_t>(vocab.unk)));
  kv.emplace_back("tokenizer.ggml.padding_token_id", GgufValue::u32(static_cast<uint32_t>(vocab.pad)));
  kv.emplace_back("tokenizer.ggml.add_space_prefix", GgufValue::boolean(false));
  kv.emplace_back("tokenizer.ggml.add_bos_token", GgufValue::boolean(true));
  if (!options.chat_template.empty()) kv.emplace_back("tokenizer.chat_template", GgufValue::str(options.chat_template));

  // Tensors, row-major shapes (GGUF's ne reversed), in the converter's naming.
  enum Init { kMatrix, kNorm, kRopeFreqs };
  struct Spec {
    std::string name;
    std::vector<int64_t> shape;
    Init init;
    bool keep_f32 = false;
  };
  std::vector<Spec> specs;
  const int64_t d = s.dim, pl = s.per_layer_dim, L = s.n_layers;
  specs.push_back({"token_embd.weight", {s.vocab_size, d}, kMatrix});
  if (pl > 0) {
    specs.push_back({"per_layer_token_embd.weight", {s.vocab_size, pl * L}, kMatrix});
    specs.push_back({"per_layer_model_proj.weight", {pl * L, d}, kMatrix});
    specs.push_back({"per_layer_proj_norm.weight", {pl}, kNorm});
  }
  // Only full layers read it; llama.cpp refuses a file with a tensor no layer uses (--layers below one period).
  bool any_full = false;
  for (int l = 0; l < s.n_layers; ++l) any_full = any_full || !s.is_sliding(l);
  if (any_full) specs.push_back({"rope_freqs.weight", {s.head_dim_full / 2}, kRopeFreqs});
  for (int l = 0; l < s.n_layers; ++l) {
    const int64_t hd = s.is_sliding(l) ? s.head_dim_swa : s.head_dim_full;
    const int64_t nkv = s.is_sliding(l) ? s.n_kv_heads_swa : s.n_kv_heads_full;
    const int64_t q = s.n_heads * hd, f = s.ffn_width(l);
    specs.push_back({blk(l, "attn_norm.weight"), {d}, kNorm});
    specs.push_back({blk(l, "attn_q.weight"), {q, d}, kMatrix});
    specs.push_back({blk(l, "attn_k.weight"), {nkv * hd, d}, kMatrix});
    if (!(s.full_k_eq_v && !s.is_sliding(l))) specs.push_back({blk(l, "attn_v.weight"), {nkv * hd, d}, kMatrix});
    specs.push_back({blk(l, "attn_q_norm.weight"), {hd}, kNorm});
    specs.push_back({blk(l, "attn_k_norm.weight"), {hd}, kNorm});
    specs.push_back({blk(l, "attn_output.weight"), {d, q}, kMatrix});
    specs.push_back({blk(l, "post_attention_norm.weight"), {d}, kNorm});
    specs.push_back({blk(l, "ffn_norm.weight"), {d}, kNorm});
    specs.push_back({blk(l, "ffn_gate.weight"), {f, d}, kMatrix});
    specs.push_back({blk(l, "ffn_up.weight"), {f, d}, kMatrix});
    specs.push_back({blk(l, "ffn_down.weight"), {d, f}, kMatrix});
    specs.push_back({blk(l, "post_ffw_norm.weight"), {d}, kNorm});
    if (s.n_experts > 0) {
      const int64_t e = s.n_experts, fe = s.expert_hidden_dim;
      specs.push_back({blk(l, "ffn_gate_inp.weight"), {e, d}, kMatrix, true});
      specs.push_back({blk(l, "ffn_gate_inp.scale"), {d}, kNorm});
      specs.push_back({blk(l, "pre_ffw_norm_2.weight"), {d}, kNorm});
      specs.push_back({blk(l, "post_ffw_norm_1.weight"), {d}, kNorm});
      specs.push_back({blk(l, "post_ffw_norm_2.weight"), {d}, kNorm});
      specs.push_back({blk(l, "ffn_gate_up_exps.weight"), {e, 2 * fe, d}, kMatrix});
      specs.push_back({blk(l, "ffn_down_exps.weight"), {e, d, fe}, kMatrix});
      specs.push_back({blk(l, "ffn_down_exps.scale"), {e}, kNorm});
    }
    if (pl > 0) {
      specs.push_back({blk(l, "inp_gate.weight"), {pl, d}, kMatrix});
      specs.push_back({blk(l, "proj.weight"), {d, pl}, kMatrix});
      specs.push_back({blk(l, "post_norm.weight"), {d}, kNorm});
    }
    specs.push_back({blk(l, "layer_output_scale.weight"), {1}, kNorm});
  }
  specs.push_back({"output_norm.weight", {d}, kNorm});

  auto type_of = [&](const Spec& sp) { return sp.init == kMatrix && !sp.keep_f32 ? mt : DType::kF32; };
  auto numel = [](const Spec& sp) {
    size_t n = 1;
    for (int64_t x : sp.shape) n *= static_cast<size_t>(x);
    return n;
  };
  size_t total = 0;
  for (const Spec& sp : specs) total += dtype_bytes(type_of(sp), numel(sp));
  auto storage = std::make_unique<std::vector<uint8_t>>(total);
  uint8_t* p = storage->data();
  Rng rng(seed * 0x9E3779B97F4A7C15ull + 4);
  std::vector<float> v;
  std::vector<GgufTensor> tensors;
  const int rotated = static_cast<int>(static_cast<float>(s.head_dim_full) * s.partial_rotary_full / 2.0f);
  for (const Spec& sp : specs) {
    const size_t n = numel(sp);
    v.resize(n);
    if (sp.init == kRopeFreqs) {
      // The converter's "proportional" rope for full layers: the first pairs rotate, the rest get a frequency
      // factor of 1e30 (no rotation).
      for (size_t i = 0; i < n; ++i) v[i] = static_cast<int>(i) < rotated ? 1.0f : 1e30f;
    } else {
      for (size_t i = 0; i < n; ++i) v[i] = (sp.init == kNorm ? 1.0f : 0.0f) + 0.02f * rng.next_normal();
    }
    if (sp.name.ends_with("post_attention_norm.weight") || sp.name.ends_with("post_ffw_norm.weight") ||
        sp.name.ends_with(".post_norm.weight"))
      for (float& x : v) x *= options.post_norm_scale;
    if (sp.name.ends_with("attn_q_norm.weight"))
      for (float& x : v) x *= options.q_norm_scale;
    if (sp.name.ends_with("ffn_gate_inp.weight"))
      for (float& x : v) x *= options.router_scale;
    if (options.rare_byte_tokens && sp.name == "token_embd.weight")
      for (int64_t row = kFirstByteToken; row < kFirstByteToken + 256; ++row)
        for (int64_t k = 0; k < d; ++k) v[static_cast<size_t>(row * d + k)] *= 0.1f;
    GgufTensor t;
    t.name = sp.name;
    t.ne.assign(sp.shape.rbegin(), sp.shape.rend());
    t.dtype = type_of(sp);
    t.bytes = dtype_bytes(t.dtype, n);
    t.data = p;
    TS_RETURN_IF_ERROR(quantize(v, t.dtype, p));
    p += t.bytes;
    tensors.push_back(std::move(t));
  }
  return write_gguf(path, kv, tensors);
}

}  // namespace tessera::model
