// llama.cpp's side of an activation comparison (docs/models.md, "Parity at full width"): runs one prompt of token
// ids through llama.cpp's library with an eval callback and writes every f32/f16 tensor its graph computes, as f32,
// to OUTDIR/NNN_<name>.bin (NNN: the order computed; header: the four int64 dimensions ne0..ne3, then the data),
// the last token's logits to OUTDIR/logits.bin, and then decodes greedily, printing each step's token, the margin
// between its best two logits and its log-probability. Built by scripts/llamacpp-dump/run.sh against the llama.cpp
// source scripts/llamacpp.sh fetched, with the same instruction-set flags; not part of Tessera's build.
//
// usage: activations MODEL OUTDIR N_DECODE KV_TYPE(f16|f32) FLASH_ATTN(0|1) ID...
// Context 512, one thread, batch = ubatch = 512 (the whole prompt is one step, as llama-server computes it).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "llama.h"

namespace {

struct Dump {
  std::string dir;
  int index = 0;
  bool on = true;
};

bool write_tensor(const Dump& d, const ggml_tensor* t, int index) {
  const int64_t n = ggml_nelements(t);
  std::vector<uint8_t> raw(ggml_nbytes(t));
  ggml_backend_tensor_get(t, raw.data(), 0, raw.size());
  std::vector<float> f(static_cast<size_t>(n));
  if (t->type == GGML_TYPE_F32) {
    std::copy_n(reinterpret_cast<const float*>(raw.data()), n, f.data());
  } else {
    const auto* h = reinterpret_cast<const ggml_fp16_t*>(raw.data());
    for (int64_t i = 0; i < n; ++i) f[static_cast<size_t>(i)] = ggml_fp16_to_fp32(h[i]);
  }
  std::string name = t->name;
  for (char& c : name)
    if (c == '/' || c == ' ' || c == '(' || c == ')') c = '_';
  char path[4096];
  std::snprintf(path, sizeof path, "%s/%03d_%s.bin", d.dir.c_str(), index, name.c_str());
  std::FILE* fp = std::fopen(path, "wb");
  if (fp == nullptr) return false;
  const int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
  bool ok = std::fwrite(ne, sizeof ne, 1, fp) == 1 && std::fwrite(f.data(), 4, f.size(), fp) == f.size();
  return std::fclose(fp) == 0 && ok;
}

// ggml's scheduler asks (ask = true) whether we want a node's data, then calls again once it is computed.
bool on_tensor(ggml_tensor* t, bool ask, void* user) {
  auto* d = static_cast<Dump*>(user);
  if (ask || !d->on) return d->on;
  if ((t->type != GGML_TYPE_F32 && t->type != GGML_TYPE_F16) || !ggml_is_contiguous(t)) return true;
  std::fprintf(stderr, "%03d %s %s %s [%lld %lld %lld %lld]\n", d->index, t->name, ggml_op_desc(t),
               ggml_type_name(t->type), static_cast<long long>(t->ne[0]), static_cast<long long>(t->ne[1]),
               static_cast<long long>(t->ne[2]), static_cast<long long>(t->ne[3]));
  if (!write_tensor(*d, t, d->index++)) {
    std::fprintf(stderr, "cannot write %s into %s\n", t->name, d->dir.c_str());
    std::exit(1);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: %s MODEL OUTDIR N_DECODE KV_TYPE(f16|f32) FLASH_ATTN(0|1) ID...\n", argv[0]);
    return 2;
  }
  Dump dump{argv[2]};
  const int n_decode = std::atoi(argv[3]);
  const std::string kv = argv[4];
  if (kv != "f16" && kv != "f32") {
    std::fprintf(stderr, "KV_TYPE must be f16 or f32, not %s\n", kv.c_str());
    return 2;
  }
  std::vector<llama_token> ids;
  for (int i = 6; i < argc; ++i) ids.push_back(std::atoi(argv[i]));

  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (model == nullptr) return 1;
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = cp.n_batch = cp.n_ubatch = 512;
  cp.n_threads = cp.n_threads_batch = 1;
  cp.type_k = cp.type_v = kv == "f16" ? GGML_TYPE_F16 : GGML_TYPE_F32;
  cp.flash_attn_type = std::atoi(argv[5]) != 0 ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
  cp.cb_eval = on_tensor;
  cp.cb_eval_user_data = &dump;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (ctx == nullptr) return 1;
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  if (llama_decode(ctx, llama_batch_get_one(ids.data(), static_cast<int32_t>(ids.size()))) != 0) return 1;
  dump.on = false;
  {
    std::FILE* fp = std::fopen((dump.dir + "/logits.bin").c_str(), "wb");
    if (fp == nullptr) return 1;
    std::fwrite(llama_get_logits_ith(ctx, -1), 4, static_cast<size_t>(n_vocab), fp);
    std::fclose(fp);
  }
  for (int step = 0; step < n_decode; ++step) {
    const float* lg = llama_get_logits_ith(ctx, -1);
    int best = 0, second = -1;
    for (int i = 1; i < n_vocab; ++i)
      if (lg[i] > lg[best]) best = i;
    for (int i = 0; i < n_vocab; ++i)
      if (i != best && (second < 0 || lg[i] > lg[second])) second = i;
    double sum = 0;
    for (int i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(lg[i]) - lg[best]);
    std::printf("step %d token %d logit %.6f margin %.6f logprob %.6f\n", step, best, lg[best], lg[best] - lg[second],
                -std::log(sum));
    llama_token t = best;
    if (llama_decode(ctx, llama_batch_get_one(&t, 1)) != 0) return 1;
  }
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
