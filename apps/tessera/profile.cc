// `tessera profile`: time the engine's prefill and decode on one backend and write a device profile (a
// latency model, roofline or additive, fitted to the points, with its fit error) for `tessera solve`.
//
// What it measures: prefill latency of one sequence versus prompt length (the engine prefills one
// sequence per call, so a batch of b prompts costs b calls and is not timed separately), and decode step
// latency versus batch size and context length, each the median of --repeats runs. KV bytes per token come
// from the engine's cache. What it does not measure: link bandwidth (there is no link benchmark yet; it is
// taken from --network-gb-s and recorded as given) and device memory when the backend does not report it
// (--memory-gb).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "base/mapped_file.h"
#include "commands.h"
#include "engine/model_runner.h"
#include "model/loader.h"
#include "ops/registry.h"
#include "solver/profile.h"
#include "solver/spec_yaml.h"

namespace tessera::cli {
namespace {

struct ProfileArgs {
  std::string model, tokenizer, backend = "ref", family, out;
  int max_tokens = 256;
  int max_batch = 16;
  int repeats = 3;
  int threads = 0;
  double memory_gb = 0;
  double network_gb_s = 0;
  double interconnect_gb_s = 0;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run_profile(const ProfileArgs& a) {
  if (a.network_gb_s <= 0)
    return fail("--network-gb-s is required: link bandwidth is not measured yet (no link benchmark)");
  if (a.repeats < 1 || a.max_tokens < 8 || a.max_batch < 1)
    return fail("--repeats, --max-tokens, --max-batch too small");
  auto model = model::load_model(a.model, a.tokenizer);
  if (!model.ok()) return fail(model.status().message());
  ops::DeviceOptions dopts;
  dopts.threads = a.threads;  // as `tessera serve --threads`, so a profile matches the node it describes
  auto device = ops::open_device(a.backend, 0, dopts);
  if (!device.ok()) return fail(device.status().message());
  const model::ModelConfig& c = model->config;
  int max_tokens = std::min(a.max_tokens, c.max_seq_len - 1);
  engine::RunnerOptions ro;
  ro.max_batch_tokens = std::max(max_tokens, a.max_batch);
  ro.max_sequences = a.max_batch;
  auto runner = engine::ModelRunner::create(**device, c, model->weights, ro);
  if (!runner.ok()) return fail(runner.status().message());
  engine::ModelRunner& r = **runner;

  solver::DeviceProfile p;
  p.family = a.family.empty() ? (*device)->info().backend : a.family;
  p.source = "measured";
  p.model = model->name;
  double mem = (*device)->info().memory_bytes > 0 ? static_cast<double>((*device)->info().memory_bytes) : 0;
  if (a.memory_gb > 0) mem = a.memory_gb * 1e9;
  if (mem <= 0) return fail(fmt::format("backend {} does not report its memory; give --memory-gb", a.backend));
  p.memory_bytes = mem;
  p.network_bandwidth = a.network_gb_s * 1e9;
  p.interconnect_bandwidth = a.interconnect_gb_s * 1e9;
  p.kv_bytes_per_token = static_cast<double>(r.kv_cache().bytes_per_block()) / r.kv_cache().block_tokens();

  std::vector<float> logits;
  auto tokens = [&](int n) { return std::vector<model::TokenId>(static_cast<size_t>(n), 1); };
  for (int t = 8; t <= max_tokens; t *= 2) {
    std::vector<double> times;
    for (int k = 0; k < a.repeats; ++k) {
      engine::SequenceKv seq;
      auto ids = tokens(t);
      auto t0 = std::chrono::steady_clock::now();
      if (Status s = r.prefill(seq, ids, logits); !s.ok()) return fail(s.message());
      times.push_back(seconds_since(t0));
      r.release(seq);
    }
    p.prefill.push_back({t, 1, median(times)});
  }
  for (int b = 1; b <= a.max_batch; b *= 2) {
    for (int ctx = 8; ctx <= max_tokens; ctx *= 4) {
      std::vector<engine::SequenceKv> seqs(static_cast<size_t>(b));
      std::vector<engine::SequenceKv*> ptrs;
      for (auto& s : seqs) {
        auto ids = tokens(ctx - 1);
        if (Status st = r.prefill(s, ids, logits); !st.ok()) return fail(st.message());
        ptrs.push_back(&s);
      }
      std::vector<double> times;
      auto step_ids = tokens(b);
      for (int k = 0; k < a.repeats && ptrs[0]->length < c.max_seq_len; ++k) {
        auto t0 = std::chrono::steady_clock::now();
        if (Status st = r.decode(ptrs, step_ids, logits); !st.ok()) return fail(st.message());
        times.push_back(seconds_since(t0));
      }
      for (auto& s : seqs) r.release(s);
      p.decode.push_back({b, ctx, median(times)});
    }
  }
  double weight_bytes = 0, params = 0;
  for (const auto& t : model->weights.tensors()) weight_bytes += t.bytes, params += static_cast<double>(t.numel());
  solver::ModelCost cost =
      solver::ModelCost::from_config(c, weight_bytes / params, p.kv_bytes_per_token / (2.0 * c.n_layers * c.kv_dim()));
  auto fit = solver::fit_latency_model(cost, p.prefill, p.decode);
  if (!fit.ok()) return fail(fit.status().message());
  p.latency = fit->first;
  p.fit = fit->second;
  std::string yaml = solver::profile_to_yaml(p);
  std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(yaml.data()), yaml.size());
  if (Status s = write_file_atomic(a.out, bytes); !s.ok()) return fail(s.message());
  std::printf(
      "profile %s (%s on %s): %zu prefill + %zu decode points; fitted %s model: overhead %.3f ms, %.3g FLOP/s, "
      "%.3g B/s; fit error mean %.1f%%, max %.1f%%\n",
      a.out.c_str(), model->name.c_str(), a.backend.c_str(), p.prefill.size(), p.decode.size(),
      p.latency.kind == solver::LatencyKind::kAdditive ? "additive" : "roofline", p.latency.overhead_s * 1e3,
      p.latency.flops_per_s, p.latency.bytes_per_s, p.fit.mean_abs_rel * 100, p.fit.max_abs_rel * 100);
  return 0;
}

}  // namespace

Action add_profile_command(CLI::App& app) {
  auto args = std::make_shared<ProfileArgs>();
  CLI::App* cmd = app.add_subcommand("profile", "Time prefill and decode on a backend and write a device profile");
  cmd->add_option("--model", args->model, "Checkpoint file, or a directory holding one checkpoint and its tokenizer")
      ->required();
  cmd->add_option("--tokenizer", args->tokenizer, "Tokenizer file (needed when --model is a file)");
  cmd->add_option("--backend", args->backend, "Operator backend")->capture_default_str();
  cmd->add_option("--family", args->family, "Device family name in the profile (default: the backend name)");
  cmd->add_option("--out", args->out, "Profile file (YAML) to write")->required();
  cmd->add_option("--max-tokens", args->max_tokens, "Longest prompt / context timed")->capture_default_str();
  cmd->add_option("--max-batch", args->max_batch, "Largest decode batch timed")->capture_default_str();
  cmd->add_option("--repeats", args->repeats, "Runs per point (the median is kept)")->capture_default_str();
  cmd->add_option("--threads", args->threads, "Host threads for the cpu backend (0: every processor)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--memory-gb", args->memory_gb, "Device memory, when the backend does not report it");
  cmd->add_option("--network-gb-s", args->network_gb_s,
                  "Link bandwidth to other instances (not measured yet: no link benchmark)");
  cmd->add_option("--interconnect-gb-s", args->interconnect_gb_s, "Bandwidth inside a multi-device instance");
  return [args] { return run_profile(*args); };
}

}  // namespace tessera::cli
