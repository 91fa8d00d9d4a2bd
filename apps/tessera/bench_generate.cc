// `tessera bench generate`: prefill and decode speed of one model on one backend, next to the host's
// ceilings measured in the same run with the same thread count, and the fraction of the roofline reached.
//
//   decode ceiling  = read bandwidth / bytes read per token (every weight matrix and norm once, plus the
//                     KV cache at the mean context of the decode phase);
//   prefill ceiling = compute peak / operations per token (2 per matrix weight, plus attention's 4 * dim per
//                     cached position at the mean prefill context); the peak of the instructions the matrix
//                     products run: int8 tiles (AMX) or int8 dot products for block-quantised weights on the
//                     cpu backend, f32 FMA otherwise (printed too, for comparison).
// Only for backends that compute in host memory: a GPU's own bandwidth and peak are not measured here.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "base/dtype.h"
#include "base/rng.h"
#include "commands.h"
#include "engine/model_runner.h"
#include "model/loader.h"
#include "ops/cpu/ceilings.h"
#include "ops/cpu/cpu_backend.h"
#include "ops/registry.h"
#include "solver/model_cost.h"

namespace tessera::cli {
namespace {

struct BenchArgs {
  std::string model, tokenizer, backend = "cpu", weight_dtype, kv_dtype = "f16";
  int threads = 1, prompt_tokens = 128, gen_tokens = 64, repeat = 3, warmup = 1;
  bool skip_ceilings = false;
  bool whole_sliding_kv = false;  // sliding layers keep every position (serve's --disable-hybrid-kv-cache-manager)
  std::string graph = "off";
  bool deterministic = false;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Spread {
  double median, min, max;
};
Spread spread(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  const double med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  return {med, v.front(), v.back()};
}

// K and V elements a quantised block holds (q8_0, q4_0): KV bytes per element are one block's over this.
constexpr int kKvBlock = 32;

// The storage type of the model's layer matrices as the runner uploads them (the first layer's ffn_up).
DType matrix_dtype(const model::LoadedModel& m, const engine::RunnerOptions& ro) {
  const model::WeightTensor* t = m.weights.find(model::layer_tensor_name(0, "ffn_up.weight"));
  if (t == nullptr) return DType::kF32;
  if (ro.weight_dtype && t->dtype == DType::kF32) return *ro.weight_dtype;
  return t->dtype;
}

int run_bench(const BenchArgs& a) {
  const auto load_start = std::chrono::steady_clock::now();
  auto model = model::load_model(a.model, a.tokenizer);
  if (!model.ok()) return fail(model.status().message());
  const model::ModelConfig& c = model->config;
  if (a.prompt_tokens + a.gen_tokens > c.max_seq_len) {
    return fail(fmt::format("--prompt-tokens + --gen-tokens = {} exceeds the model's context of {}",
                            a.prompt_tokens + a.gen_tokens, c.max_seq_len));
  }
  ops::DeviceOptions dopts;
  dopts.threads = a.threads;
  auto device = ops::open_device(a.backend, 0, dopts);
  if (!device.ok()) return fail(device.status().message());
  engine::RunnerOptions ro;
  ro.max_batch_tokens = std::max(1, std::min(512, a.prompt_tokens));
  if (!a.weight_dtype.empty()) ro.weight_dtype = parse_dtype(a.weight_dtype);
  ro.kv.dtype = *parse_dtype(a.kv_dtype);
  // One sequence of prompt + gen positions: the cache holds that, not the file's whole context (llama3.1-8b records
  // 131072 positions, 17 GB of f16 KV that the load zeroed for 35 s of its 38).
  ro.kv.prefix_cache = false;
  ro.kv.num_blocks = (a.prompt_tokens + a.gen_tokens + ro.kv.block_tokens - 1) / ro.kv.block_tokens;
  ro.graph = a.graph == "on";
  ro.deterministic = a.deterministic;
  ro.kv.window_kv = !a.whole_sliding_kv;
  auto runner = engine::ModelRunner::create(**device, c, model->weights, ro);
  if (!runner.ok()) return fail(runner.status().message());
  engine::ModelRunner& r = **runner;
  const double load_s = seconds_since(load_start);  // the file read, the weights uploaded and prepared, KV allocated

  Rng rng(42);
  std::vector<engine::TokenId> prompt(static_cast<size_t>(a.prompt_tokens));
  for (auto& t : prompt) t = static_cast<engine::TokenId>(rng.next_u32() % static_cast<uint32_t>(c.vocab_size));
  std::vector<double> prefill_tps, decode_tps;
  std::vector<float> logits;
  for (int rep = -a.warmup; rep < a.repeat; ++rep) {  // negative reps warm caches and thread pools; not counted
    engine::SequenceKv seq;
    auto t0 = std::chrono::steady_clock::now();
    if (Status s = r.prefill(seq, prompt, logits); !s.ok()) return fail(s.message());
    const double tp = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    for (int g = 0; g < a.gen_tokens; ++g) {
      auto next = static_cast<engine::TokenId>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      engine::SequenceKv* sp = &seq;
      if (Status s = r.decode({&sp, 1}, {&next, 1}, logits); !s.ok()) return fail(s.message());
    }
    const double td = seconds_since(t0);
    r.release(seq);
    if (rep >= 0) {
      prefill_tps.push_back(a.prompt_tokens / tp);
      decode_tps.push_back(a.gen_tokens / td);
    }
  }

  // Work per token (solver/model_cost.h: sliding windows, KV-sharing and linear layers, routed experts). Decode reads
  // the weights the runner streams, the KV at the decode phase's mean context and the recurrent state (read and
  // written); a prompt multiplies the classifier, and where the runner prunes it the last layer's feed-forward, for
  // its last row only.
  const double kv_bytes = static_cast<double>(dtype_bytes(ro.kv.dtype, kKvBlock)) / kKvBlock;
  const solver::ModelCost cost = solver::ModelCost::from_config(c, 1.0, kv_bytes);
  const double decode_bytes = static_cast<double>(r.weight_bytes_per_token()) +
                              cost.decode_kv_read_bytes(a.prompt_tokens + a.gen_tokens / 2.0) + 2.0 * cost.state_bytes;
  const double last_ffn = r.prunes_last_layer() ? solver::ffn_params(c, c.n_layers - 1) : 0.0;
  const double prefill_flops =
      cost.prefill_flops(a.prompt_tokens) / a.prompt_tokens - 2.0 * last_ffn + 2.0 * last_ffn / a.prompt_tokens;

  const Spread pf = spread(prefill_tps), dc = spread(decode_tps);
  std::printf("model %s (%.1fM params), backend %s (%s), weights %s, kv %s, threads %d, prompt %d, gen %d, repeat %d\n",
              model->name.c_str(), c.parameter_count() / 1e6, a.backend.c_str(), (*device)->info().name.c_str(),
              a.weight_dtype.empty() ? "as stored" : a.weight_dtype.c_str(), a.kv_dtype.c_str(), a.threads,
              a.prompt_tokens, a.gen_tokens, a.repeat);
  std::printf("load     %.2f s (file read, weights uploaded and prepared for the device, KV allocated)\n", load_s);
  const engine::KvCache& kv = r.kv_cache();
  const double kv_mib = static_cast<double>(kv.bytes_per_block()) * kv.num_blocks() / (1024.0 * 1024.0);
  if (kv.windowed()) {
    const double window_mib =
        static_cast<double>(kv.window_bytes_per_block()) * kv.window_pool().num_blocks() / (1024.0 * 1024.0);
    std::printf("kv       %.1f MiB: full layers %.1f MiB, sliding layers %.1f MiB (their window of %d only)\n",
                kv_mib + window_mib, kv_mib, window_mib, kv.window());
  } else {
    std::printf("kv       %.1f MiB\n", kv_mib);
  }
  std::printf("prefill  tok/s median %.1f  min %.1f  max %.1f   (%.3f GFLOP/token)\n", pf.median, pf.min, pf.max,
              prefill_flops / 1e9);
  std::printf("decode   tok/s median %.2f  min %.2f  max %.2f   (%.1f MB read/token)\n", dc.median, dc.min, dc.max,
              decode_bytes / 1e6);
  // The host's ceilings bound only the backends that compute in host memory (cpu, ref, vulkan on lavapipe); an
  // H200 under cuda read 109% and 203% of them (scripts/gpu-check.sh, 2026-12-04), which says nothing.
  const bool host_bound = a.backend == "cpu" || a.backend == "ref" || (*device)->info().host_visible;
  if (!a.skip_ceilings && !host_bound) {
    std::printf("ceilings: not measured (backend %s computes in its own memory; the host's ceilings do not bound it)\n",
                a.backend.c_str());
  }
  if (!a.skip_ceilings && host_bound) {
    const ops::cpu::Ceilings ceil = ops::cpu::measure_ceilings(std::max(1, a.threads));
    const double decode_roof = ceil.read_bytes_per_s / decode_bytes;
    std::printf("ceilings (%d threads): read %.2f GB/s, triad %.2f GB/s, FMA peak %.1f GFLOP/s (f32, %s)\n",
                std::max(1, a.threads), ceil.read_bytes_per_s / 1e9, ceil.triad_bytes_per_s / 1e9,
                ceil.fma_flops_per_s / 1e9, ceil.fma_kind.c_str());
    std::printf("compute ceilings: int8 dot %.1f GOP/s (%s), AMX int8 %.1f GOP/s, AMX bf16 %.1f GFLOP/s%s\n",
                ceil.int8_dot_ops_per_s / 1e9, ceil.int8_dot_kind.c_str(), ceil.amx_int8_ops_per_s / 1e9,
                ceil.amx_bf16_flops_per_s / 1e9,
                ceil.amx_int8_ops_per_s > 0 ? "" : " (AMX not measured: the kernels that run here do not use it)");
    std::printf("roofline decode  %.1f tok/s -> %.0f%% reached (median)\n", decode_roof,
                100.0 * dc.median / decode_roof);
    // Prefill against the compute ceiling of the instructions its matrix products run (attention's flops are
    // counted against it too), and against the f32 FMA peak for comparison with earlier reports.
    const ops::cpu::ComputeCeiling pc =
        a.backend == "cpu" ? ops::cpu::matmul_ceiling(ceil, matrix_dtype(*model, ro), ops::cpu::detected_isa())
                           : ops::cpu::ComputeCeiling{ceil.fma_flops_per_s, "f32 FMA"};
    const double prefill_roof = pc.ops_per_s / prefill_flops;
    std::printf("roofline prefill %.1f tok/s -> %.0f%% reached (median) against the %s peak\n", prefill_roof,
                100.0 * pf.median / prefill_roof, pc.what);
    if (pc.ops_per_s != ceil.fma_flops_per_s) {
      const double fma_roof = ceil.fma_flops_per_s / prefill_flops;
      std::printf("roofline prefill %.1f tok/s -> %.0f%% reached (median) against the f32 FMA peak\n", fma_roof,
                  100.0 * pf.median / fma_roof);
    }
  }
  return 0;
}

}  // namespace

Action add_bench_generate_subcommand(CLI::App& bench) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* cmd = bench.add_subcommand("generate",
                                       "Prefill and decode speed of one model on one backend, with "
                                       "measured ceilings and the fraction of the roofline reached");
  cmd->add_option("--model", args->model, "Checkpoint file, or a directory holding one checkpoint and its tokenizer")
      ->required();
  cmd->add_option("--tokenizer", args->tokenizer, "Tokenizer file (needed when --model is a file)");
  cmd->add_option("--backend", args->backend, "Operator backend")->capture_default_str();
  cmd->add_option("--threads", args->threads, "Host threads")->check(CLI::Range(1, 1024))->capture_default_str();
  cmd->add_option("--prompt-tokens", args->prompt_tokens, "Prompt length (random tokens)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--gen-tokens", args->gen_tokens, "Tokens decoded after the prompt")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--repeat", args->repeat, "Timed repetitions (after --warmup untimed ones)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  // 0 for long prompts, where a warm-up prefill of 16384 tokens costs minutes (llama-bench --no-warmup).
  cmd->add_option("--warmup", args->warmup, "Untimed runs before the timed ones")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  cmd->add_option("--weight-dtype", args->weight_dtype, "Convert f32 weight matrices at load (default: as stored)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0"}));
  cmd->add_option("--kv-dtype", args->kv_dtype, "KV cache element type (llama.cpp's -ctk/-ctv types)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0"}))
      ->capture_default_str();
  cmd->add_option("--graph", args->graph, "Decode through recorded graphs (backends with supports_graphs)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  cmd->add_flag("--deterministic", args->deterministic,
                "Prompts attend through the decode kernels (tessera serve --deterministic): what that costs prefill");
  cmd->add_flag("--no-ceilings", args->skip_ceilings, "Skip the bandwidth and FMA measurements");
  cmd->add_flag("--disable-hybrid-kv-cache-manager", args->whole_sliding_kv,
                "Sliding-window layers keep every position, not only their window (as tessera serve's flag)");
  return [args] { return run_bench(*args); };
}

}  // namespace tessera::cli
