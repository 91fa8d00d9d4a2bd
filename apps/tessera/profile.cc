// `tessera profile`: time the engine's prefill and decode on one backend and write a device profile (a
// latency model, roofline or additive, fitted to the points, with its fit error) for `tessera solve`.
//
// What it measures: prefill latency of one sequence versus prompt length (the engine prefills one
// sequence per call, so a batch of b prompts costs b calls and is not timed separately), and decode step
// latency versus batch size and context length, each the fastest (or the median: --statistic) of --repeats
// runs. Prefill runs have a pause as long as the run between them (a node is idle between prompts); decode
// steps of one point run back to back after an untimed one (a node decodes a stream's steps back to back),
// with a pause after the point. On a shared machine a run is only ever slowed by other processes, so the
// fastest is the cost of the work; the pauses keep this process from being scheduled as a CPU hog, which a
// serving node is not. KV bytes per token come
// from the engine's cache. The link rate is that of the same-host KV hand-off (export every layer to the
// wire layout, one copy for the shm link, import), unless --network-gb-s gives another link's figure
// (between hosts: `tessera link bench`). Not measured: device memory when the backend does not report it
// (--memory-gb).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/core.h>

#include "api/kv_layout.h"
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
  std::string statistic = "min";
  bool prefill_export = false;
  int threads = 0;
  double memory_gb = 0;
  double network_gb_s = 0;
  double interconnect_gb_s = 0;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double fastest(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run_profile(const ProfileArgs& a) {
  if (a.statistic != "min" && a.statistic != "median")
    return fail(fmt::format("unknown --statistic '{}'; known: min, median", a.statistic));
  auto pick = [&](const std::vector<double>& v) { return a.statistic == "min" ? fastest(v) : median(v); };
  auto pause = [](double seconds) { std::this_thread::sleep_for(std::chrono::duration<double>(seconds)); };
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
  // A prefill node streams each layer's K and V out as soon as the layer is computed (docs/pd-protocol.md):
  // with --prefill-export the timed prefill does the same (each layer exported into the canonical wire layout,
  // api/kv_layout.h, in link memory: one copy).
  std::vector<uint8_t> staging;
  auto run_prefill = [&](engine::SequenceKv& seq, std::span<const model::TokenId> ids) -> Status {
    if (!a.prefill_export) return r.prefill(seq, ids, logits);
    const int first = seq.length, n = static_cast<int>(ids.size());
    TS_RETURN_IF_ERROR(r.kv_cache().reserve(seq, first + n));
    const api::KvLayout wire{c.n_layers, c.kv_dim(), DType::kF32, n};
    staging.resize(wire.bytes());
    engine::Segment seg{&seq, ids, true};
    return r.step(std::span(&seg, 1), logits, [&](int layer) -> Status {
      return r.export_kv(seq, layer, first, n, wire.dtype, staging.data() + wire.k_offset(layer, 0),
                         staging.data() + wire.v_offset(layer, 0));
    });
  };
  std::vector<int> prompt_lengths;
  for (int t = 8; t <= max_tokens; t *= 2) prompt_lengths.push_back(t);
  if (prompt_lengths.back() != max_tokens) prompt_lengths.push_back(max_tokens);  // the longest prompt too
  for (int t : prompt_lengths) {
    std::vector<double> times;
    for (int k = 0; k < a.repeats; ++k) {
      engine::SequenceKv seq;
      auto ids = tokens(t);
      auto t0 = std::chrono::steady_clock::now();
      if (Status s = run_prefill(seq, ids); !s.ok()) return fail(s.message());
      times.push_back(seconds_since(t0));
      r.release(seq);
      pause(times.back());
    }
    p.prefill.push_back({t, 1, pick(times)});
  }
  // Decode contexts: 8, 32, 128, ... and the longest one whose timed steps still fit the model's context, so
  // that steps of long prompts are read off a measured point rather than a line extended past the last one.
  std::vector<int> contexts;
  for (int ctx = 8; ctx <= max_tokens; ctx *= 4) contexts.push_back(ctx);
  if (const int top = std::min(max_tokens, c.max_seq_len - a.repeats - 1); top > contexts.back()) {
    contexts.push_back(top);
  }
  // Batches 1, 2, 3, 4, 8, 16, ...: every batch below 4, where the cpu backend changes kernels (a step of 3
  // costs what one of 2 does, one of 4 twice that), so no interpolation spans the jump.
  for (int b = 1; b <= a.max_batch; b = b < 4 ? b + 1 : b * 2) {
    for (int ctx : contexts) {
      std::vector<engine::SequenceKv> seqs(static_cast<size_t>(b));
      std::vector<engine::SequenceKv*> ptrs;
      for (auto& s : seqs) {
        auto ids = tokens(ctx - 1);
        if (Status st = r.prefill(s, ids, logits); !st.ok()) return fail(st.message());
        ptrs.push_back(&s);
      }
      // Decode steps back to back, after one untimed step, as a node runs them while it has sequences to
      // decode (pausing between steps measured a step after idling, 10-25% slower here than a stream's).
      std::vector<double> times;
      auto step_ids = tokens(b);
      if (ptrs[0]->length < c.max_seq_len) {
        if (Status st = r.decode(ptrs, step_ids, logits); !st.ok()) return fail(st.message());
      }
      double busy = 0;
      for (int k = 0; k < a.repeats && ptrs[0]->length < c.max_seq_len; ++k) {
        auto t0 = std::chrono::steady_clock::now();
        if (Status st = r.decode(ptrs, step_ids, logits); !st.ok()) return fail(st.message());
        times.push_back(seconds_since(t0));
        busy += times.back();
      }
      pause(busy);
      for (auto& s : seqs) r.release(s);
      p.decode.push_back({b, ctx, pick(times)});
    }
  }
  if (a.network_gb_s > 0) {
    p.network_bandwidth = a.network_gb_s * 1e9;
  } else {
    // The same-host hand-off of a prompt's KV (docs/pd-protocol.md): export every layer to the f32 wire
    // layout, copy it once (the shm link), import it into paged blocks. Its rate stands for the link.
    engine::SequenceKv seq;
    auto ids = tokens(max_tokens);
    if (Status s = r.prefill(seq, ids, logits); !s.ok()) return fail(s.message());
    const api::KvLayout layout{c.n_layers, c.kv_dim(), DType::kF32, max_tokens};
    std::vector<uint8_t> sent(layout.bytes()), wire(layout.bytes());
    std::vector<double> times;
    for (int rep = 0; rep < std::max(3, a.repeats); ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      for (int l = 0; l < c.n_layers; ++l) {
        uint8_t* k = sent.data() + layout.k_offset(l, 0);
        uint8_t* v = sent.data() + layout.v_offset(l, 0);
        if (Status s = r.export_kv(seq, l, 0, max_tokens, layout.dtype, k, v); !s.ok()) return fail(s.message());
        // The link's one copy (shm), layer by layer as the prefill node sends it.
        std::copy(k, k + 2 * layout.half_bytes(), wire.begin() + static_cast<std::ptrdiff_t>(layout.k_offset(l, 0)));
        if (Status s = r.import_kv(seq, l, 0, max_tokens, layout.dtype, wire.data() + layout.k_offset(l, 0),
                                   wire.data() + layout.v_offset(l, 0));
            !s.ok())
          return fail(s.message());
      }
      times.push_back(seconds_since(t0));
      pause(times.back());
    }
    r.release(seq);
    p.network_bandwidth = static_cast<double>(layout.bytes()) / pick(times);
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
      "%.3g B/s; fit error mean %.1f%%, max %.1f%%; link %.3g GB/s (%s)\n",
      a.out.c_str(), model->name.c_str(), a.backend.c_str(), p.prefill.size(), p.decode.size(),
      p.latency.kind == solver::LatencyKind::kAdditive ? "additive" : "roofline", p.latency.overhead_s * 1e3,
      p.latency.flops_per_s, p.latency.bytes_per_s, p.fit.mean_abs_rel * 100, p.fit.max_abs_rel * 100,
      p.network_bandwidth / 1e9, a.network_gb_s > 0 ? "as given" : "measured: same-host KV export + copy + import");
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
  cmd->add_option("--repeats", args->repeats, "Runs per point")->capture_default_str();
  cmd->add_flag("--prefill-export", args->prefill_export,
                "Time prefill as a prefill node runs it: each layer's KV exported to the wire layout as it is made");
  cmd->add_option("--statistic", args->statistic, "Kept of the runs per point: min (the fastest) or median")
      ->capture_default_str();
  cmd->add_option("--threads", args->threads, "Host threads for the cpu backend (0: every processor)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--memory-gb", args->memory_gb, "Device memory, when the backend does not report it");
  cmd->add_option("--network-gb-s", args->network_gb_s,
                  "Link bandwidth to other instances (default: measure the same-host KV hand-off: export, copy, "
                  "import)");
  cmd->add_option("--interconnect-gb-s", args->interconnect_gb_s, "Bandwidth inside a multi-device instance");
  return [args] { return run_profile(*args); };
}

}  // namespace tessera::cli
