// `tessera profile`: time the engine's prefill and decode on one backend and write a device profile (a
// latency model, roofline or additive, fitted to the points, with its fit error) for `tessera solve`. What is
// measured and how: src/bench/engine_profile.h. Not measured: device memory when the backend does not report
// it (--memory-gb).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <span>
#include <string>

#include <fmt/core.h>

#include "base/dtype.h"
#include "base/mapped_file.h"
#include "bench/engine_profile.h"
#include "commands.h"
#include "model/loader.h"
#include "ops/registry.h"
#include "solver/profile.h"
#include "solver/spec_yaml.h"

namespace tessera::cli {
namespace {

struct ProfileArgs {
  std::string model, tokenizer, backend = "ref", family, out, kv_dtype = "f16";
  bench::EngineProfileOptions measure;
  int threads = 0;
  double memory_gb = 0;
  double interconnect_gb_s = 0;
};

int run_profile(const ProfileArgs& a) {
  if (Status s = bench::check_engine_profile_options(a.measure); !s.ok()) return fail(s.message());
  bench::EngineProfileOptions measure = a.measure;
  measure.kv_dtype = *parse_dtype(a.kv_dtype);  // one of the types the flag admits
  auto model = model::load_model(a.model, a.tokenizer);
  if (!model.ok()) return fail(model.status().message());
  ops::DeviceOptions dopts;
  dopts.threads = a.threads;  // as `tessera serve --threads`, so a profile matches the node it describes
  auto device = ops::open_device(a.backend, 0, dopts);
  if (!device.ok()) return fail(device.status().message());

  solver::DeviceProfile p;
  p.family = a.family.empty() ? (*device)->info().backend : a.family;
  double mem = (*device)->info().memory_bytes > 0 ? static_cast<double>((*device)->info().memory_bytes) : 0;
  if (a.memory_gb > 0) mem = a.memory_gb * 1e9;
  if (mem <= 0) return fail(fmt::format("backend {} does not report its memory; give --memory-gb", a.backend));
  p.memory_bytes = mem;
  p.interconnect_bandwidth = a.interconnect_gb_s * 1e9;
  if (Status s = bench::measure_engine_profile(**device, *model, measure, p); !s.ok()) return fail(s.message());

  std::string yaml = solver::profile_to_yaml(p);
  std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(yaml.data()), yaml.size());
  if (Status s = write_file_atomic(a.out, bytes); !s.ok()) return fail(s.message());
  std::printf(
      "profile %s (%s on %s): %zu prefill + %zu decode points; fitted %s model: overhead %.3f ms, %.3g FLOP/s, "
      "%.3g B/s; fit error mean %.1f%%, max %.1f%%; link %.3g GB/s (%s)\n",
      a.out.c_str(), model->name.c_str(), a.backend.c_str(), p.prefill.size(), p.decode.size(),
      p.latency.kind == solver::LatencyKind::kAdditive ? "additive" : "roofline", p.latency.overhead_s * 1e3,
      p.latency.flops_per_s, p.latency.bytes_per_s, p.fit.mean_abs_rel * 100, p.fit.max_abs_rel * 100,
      p.network_bandwidth / 1e9,
      a.measure.network_gb_s > 0 ? "as given" : "measured: same-host KV export + copy + import");
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
  cmd->add_option("--max-tokens", args->measure.max_tokens, "Longest prompt / context timed")->capture_default_str();
  cmd->add_option("--max-batch", args->measure.max_batch, "Largest decode batch timed")->capture_default_str();
  cmd->add_option("--repeats", args->measure.repeats, "Runs per point")->capture_default_str();
  cmd->add_flag("--prefill-export", args->measure.prefill_export,
                "Time prefill as a prefill node runs it: each layer's KV exported to the wire layout as it is made");
  cmd->add_option("--kv-dtype", args->kv_dtype,
                  "KV cache element type timed, as tessera serve's --kv-dtype: f32, f16, bf16, q8_0, q4_0")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0"}))
      ->capture_default_str();
  cmd->add_option("--statistic", args->measure.statistic, "Kept of the runs per point: min (the fastest) or median")
      ->capture_default_str();
  cmd->add_option("--threads", args->threads, "Host threads for the cpu backend (0: every processor)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--memory-gb", args->memory_gb, "Device memory, when the backend does not report it");
  cmd->add_option("--network-gb-s", args->measure.network_gb_s,
                  "Link bandwidth to other instances (default: measure the same-host KV hand-off: export, copy, "
                  "import)");
  cmd->add_option("--interconnect-gb-s", args->interconnect_gb_s, "Bandwidth inside a multi-device instance");
  return [args] { return run_profile(*args); };
}

}  // namespace tessera::cli
