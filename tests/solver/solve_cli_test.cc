// `tessera solve` end to end: spec files in, plan out; bad specs give one clear error line and exit 1.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <fstream>

#include "support/paths.h"
#include "support/process.h"

namespace tessera::testing {
namespace {

struct Specs {
  std::string dir, fleet, workload, slo;
};

Specs write_specs(const std::string& slo_text = "ttft_ms: 2000\ntpot_ms: 80\npercentile: 90\n") {
  Specs s;
  s.dir = scratch_dir();
  s.fleet = s.dir + "/fleet.yaml";
  s.workload = s.dir + "/workload.yaml";
  s.slo = s.dir + "/slo.yaml";
  std::ofstream(s.fleet) << R"(pools:
  - name: big
    count: 2
    cost_per_hour: 4
    batch_limits: [32]
    datasheet: {peak_tflops: 900, memory_bandwidth_gb_s: 3000, memory_gb: 80, network_gb_s: 50}
  - name: small
    count: 2
    cost_per_hour: 1.5
    batch_limits: [32]
    datasheet: {peak_tflops: 300, memory_bandwidth_gb_s: 2000, memory_gb: 64, network_gb_s: 25}
)";
  std::ofstream(s.workload) << R"(model: {name: llama-7b-shape, dim: 4096, hidden_dim: 11008, n_layers: 32, n_heads: 32,
        n_kv_heads: 32, vocab_size: 32000, max_seq_len: 4096}
rate: 10
requests: 200
input: {uniform: [100, 800]}
output: {uniform: [20, 120]}
)";
  std::ofstream(s.slo) << slo_text;
  return s;
}

TEST(SolveCli, WritesAPlan) {
  Specs s = write_specs();
  std::string out = s.dir + "/plan.yaml";
  ProcessResult r = run_process({tessera_bin(), "solve", "--fleet", s.fleet, "--workload", s.workload, "--slo", s.slo,
                                 "--out", out, "--method", "exhaustive"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("plan: "), std::string::npos);
  EXPECT_NE(r.out.find("TTFT ms p50"), std::string::npos);
  EXPECT_EQ(r.out.find("FALLBACK"), std::string::npos);
  YAML::Node plan = YAML::LoadFile(out);
  EXPECT_TRUE(plan["meets_slo"].as<bool>());
  EXPECT_FALSE(plan["fallback"].as<bool>());
  EXPECT_GT(plan["predicted"]["goodput_rps"].as<double>(), 9.0);
  EXPECT_GE(plan["predicted"]["attainment"].as<double>(), 0.9);
  ASSERT_EQ(plan["pools"].size(), 2u);
  int used = 0;
  for (const auto& p : plan["pools"]) used += p["devices_used"].as<int>();
  EXPECT_GE(used, 1);
  // The scalable search on the same specs reaches the same objective here (a two-pool fleet).
  std::string out2 = s.dir + "/plan2.yaml";
  ProcessResult r2 = run_process({tessera_bin(), "solve", "--fleet", s.fleet, "--workload", s.workload, "--slo", s.slo,
                                  "--out", out2, "--method", "scalable"});
  ASSERT_EQ(r2.exit_code, 0) << r2.err;
  YAML::Node plan2 = YAML::LoadFile(out2);
  EXPECT_GE(plan2["predicted"]["goodput_per_cost"].as<double>(),
            0.98 * plan["predicted"]["goodput_per_cost"].as<double>());
}

TEST(SolveCli, SaysWhenItFallsBack) {
  Specs s = write_specs("ttft_ms: 1\ntpot_ms: 0.1\n");
  ProcessResult r = run_process({tessera_bin(), "solve", "--fleet", s.fleet, "--workload", s.workload, "--slo", s.slo});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("FALLBACK: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("no plan meets the SLO"), std::string::npos);
}

TEST(SolveCli, BadSpecsGiveOneClearError) {
  Specs s = write_specs();
  auto solve = [&](const std::string& fleet, const std::string& workload, const std::string& slo) {
    return run_process({tessera_bin(), "solve", "--fleet", fleet, "--workload", workload, "--slo", slo});
  };
  ProcessResult missing = solve(s.dir + "/nope.yaml", s.workload, s.slo);
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("tessera: error: cannot open"), std::string::npos) << missing.err;
  std::ofstream(s.dir + "/broken.yaml") << "pools: [{name: a\n";
  ProcessResult broken = solve(s.dir + "/broken.yaml", s.workload, s.slo);
  EXPECT_EQ(broken.exit_code, 1);
  EXPECT_NE(broken.err.find("broken.yaml: YAML syntax error at line"), std::string::npos) << broken.err;
  std::ofstream(s.dir + "/typo.yaml") << "ttft_ms: 1\ntpot_msec: 2\n";
  ProcessResult typo = solve(s.fleet, s.workload, s.dir + "/typo.yaml");
  EXPECT_EQ(typo.exit_code, 1);
  EXPECT_NE(typo.err.find("unknown key 'tpot_msec'"), std::string::npos) << typo.err;
  std::ofstream(s.dir + "/empty.yaml") << "";
  ProcessResult empty = solve(s.fleet, s.dir + "/empty.yaml", s.slo);
  EXPECT_EQ(empty.exit_code, 1);
  EXPECT_NE(empty.err.find("expected a YAML mapping"), std::string::npos) << empty.err;
  ProcessResult method = run_process(
      {tessera_bin(), "solve", "--fleet", s.fleet, "--workload", s.workload, "--slo", s.slo, "--method", "magic"});
  EXPECT_EQ(method.exit_code, 1);
  EXPECT_NE(method.err.find("known: auto, exhaustive, scalable"), std::string::npos) << method.err;
  for (const ProcessResult* r : {&missing, &broken, &typo, &empty, &method}) EXPECT_FALSE(r->timed_out);
}

}  // namespace
}  // namespace tessera::testing

namespace tessera::testing {
namespace {

TEST(ProfileCli, MeasuresFitsAndFeedsTheSolver) {
  TS_REQUIRE_STORIES260K();
  std::string dir = scratch_dir();
  std::string profile = dir + "/ref.yaml";
  ProcessResult r = run_process({tessera_bin(), "profile", "--model", stories260k_dir(), "--backend", "ref",
                                 "--memory-gb", "1", "--network-gb-s", "1", "--max-tokens", "64", "--max-batch", "4",
                                 "--repeats", "1", "--out", profile});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("fit error mean"), std::string::npos);
  YAML::Node p = YAML::LoadFile(profile);
  EXPECT_EQ(p["source"].as<std::string>(), "measured");
  EXPECT_EQ(p["model"].as<std::string>(), "stories260K");
  EXPECT_EQ(p["prefill"].size(), 4u);  // 8, 16, 32, 64 tokens
  EXPECT_EQ(p["decode"].size(), 12u);  // batch 1, 2, 3, 4 x context 8, 32 and the longest, 64
  EXPECT_EQ(p["decode"][2]["context"].as<int>(), 64);
  EXPECT_EQ(p["decode"][6]["batch"].as<int>(), 3);
  EXPECT_EQ(p["fit"]["points"].as<int>(), 16);
  EXPECT_GE(p["fit"]["mean_abs_rel_error"].as<double>(), 0.0);
  // stories260K: 5 layers x kv_dim 32 (4 kv heads of 8) x 2 (k, v) x 2 bytes (an f16 cache, as tessera serve keeps
  // by default; --kv-dtype f32 times an f32 one) = 640 bytes.
  EXPECT_EQ(p["kv_bytes_per_token"].as<double>(), 640);
  // The measured profile drives a plan.
  std::ofstream(dir + "/fleet.yaml") << "pools:\n  - {name: cpu, count: 2, cost_per_hour: 0.1, profile: ref.yaml}\n";
  std::ofstream(dir + "/workload.yaml")
      << "model: {shape: tiny}\nrate: 2\nrequests: 50\ninput: {uniform: [8, 64]}\noutput: {uniform: [4, 32]}\n";
  std::ofstream(dir + "/slo.yaml") << "ttft_ms: 2000\ntpot_ms: 200\n";
  ProcessResult s = run_process({tessera_bin(), "solve", "--fleet", dir + "/fleet.yaml", "--workload",
                                 dir + "/workload.yaml", "--slo", dir + "/slo.yaml"});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_NE(s.out.find("plan: cpu: "), std::string::npos) << s.out;
}

TEST(ProfileCli, MeasuresTheSameHostHandOffUnlessTheLinkIsGiven) {
  TS_REQUIRE_STORIES260K();
  std::string out = scratch_dir() + "/p.yaml";
  ProcessResult r =
      run_process({tessera_bin(), "profile", "--model", stories260k_dir(), "--backend", "ref", "--memory-gb", "1",
                   "--max-tokens", "32", "--max-batch", "2", "--repeats", "1", "--out", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("measured: same-host KV export + copy + import"), std::string::npos) << r.out;
  // Copies through host memory: far above 10 MB/s and far below 1 TB/s.
  double gb_s = YAML::LoadFile(out)["network_gb_s"].as<double>();
  EXPECT_GT(gb_s, 0.01);
  EXPECT_LT(gb_s, 1000);
  ProcessResult b = run_process({tessera_bin(), "profile", "--model", stories260k_dir(), "--backend", "nope",
                                 "--network-gb-s", "1", "--out", scratch_dir() + "/p.yaml"});
  EXPECT_EQ(b.exit_code, 1);
  EXPECT_NE(b.err.find("nope"), std::string::npos) << b.err;
}

}  // namespace
}  // namespace tessera::testing
