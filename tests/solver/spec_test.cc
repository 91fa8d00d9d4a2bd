// Spec files: good files parse to the values they state; bad files give an error naming the problem.
#include <gtest/gtest.h>

#include <fstream>

#include "model/synth_gemma4.h"
#include "solver/spec_yaml.h"
#include "support/paths.h"

namespace tessera::solver {
namespace {

const char* kFleet = R"(
budget_per_hour: 40
token_budget: 1024
pools:
  - name: fast
    family: h100
    count: 4
    cost_per_hour: 4.5
    batch_limits: [16, 64]
    datasheet: {peak_tflops: 989, memory_bandwidth_gb_s: 3350, memory_gb: 80, network_gb_s: 50,
                interconnect_gb_s: 450, flops_efficiency: 0.5}
  - name: cheap
    count: 2
    cost_per_hour: 1
    datasheet: {peak_tflops: 312, memory_bandwidth_gb_s: 2039, memory_gb: 80, network_gb_s: 25}
)";

const char* kWorkload = R"(
model: {shape: stories110M, weight_bytes: 2}
rate: 5
arrival: uniform
requests: 10
input: {uniform: [10, 20]}
output: {fixed: 7}
)";

Status fleet_error(const std::string& text) { return parse_fleet(text, "f.yaml", ".").status(); }
Status workload_error(const std::string& text) { return parse_workload(text, "w.yaml", ".").status(); }

void expect_error(const Status& s, const std::string& fragment) {
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find(fragment), std::string::npos) << "message: " << s.message();
}

TEST(Spec, FleetParses) {
  auto f = parse_fleet(kFleet, "f.yaml", ".");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  ASSERT_EQ(f->pools.size(), 2u);
  EXPECT_EQ(f->pools[0].profile.family, "h100");
  EXPECT_EQ(f->pools[1].profile.family, "cheap");  // defaults to the pool name
  EXPECT_DOUBLE_EQ(f->pools[0].profile.latency.flops_per_s, 494.5e12);
  EXPECT_DOUBLE_EQ(f->pools[0].profile.memory_bytes, 80e9);
  EXPECT_DOUBLE_EQ(f->pools[0].profile.interconnect_bandwidth, 450e9);
  EXPECT_EQ(f->pools[0].batch_limits, (std::vector<int>{16, 64}));
  EXPECT_EQ(f->token_budget, 1024);
  EXPECT_DOUBLE_EQ(f->budget_per_hour, 40);
}

TEST(Spec, FleetErrorsNameTheProblem) {
  expect_error(fleet_error("pools: []"), "no pools");
  expect_error(fleet_error("pools: [{name: a, count: 1}]"), "missing required key 'cost_per_hour'");
  expect_error(fleet_error("pools: [{name: a, count: two, cost_per_hour: 1}]"), "'two' is not a valid integer");
  expect_error(fleet_error("pools: [{name: a, count: 1, cost_per_hour: 1}]"), "exactly one of 'profile'");
  expect_error(fleet_error("pools: [{name: a, count: 1, cost_per_hour: 1, datasheet: {peak_tflop: 1}}]"),
               "unknown key 'peak_tflop'");
  expect_error(fleet_error("pools: [{name: a, count: 0, cost_per_hour: 1, datasheet: {peak_tflops: 1, "
                           "memory_bandwidth_gb_s: 1, memory_gb: 1, network_gb_s: 1}}]"),
               "count 0");
  expect_error(fleet_error("pools: [{name: a, count: 1, cost_per_hour: 1, datasheet: {peak_tflops: -1, "
                           "memory_bandwidth_gb_s: 1, memory_gb: 1, network_gb_s: 1}}]"),
               "peak_tflops must be positive");
  expect_error(fleet_error("pools: [{name: a, count: 1, cost_per_hour: 1, instance_sizes: [3], datasheet: "
                           "{peak_tflops: 1, memory_bandwidth_gb_s: 1, memory_gb: 1, network_gb_s: 1}}]"),
               "power of two");
  expect_error(fleet_error("pools: {a: 1"), "YAML syntax error");
  expect_error(fleet_error("pools: [{name: a, count: 1, cost_per_hour: .nan, datasheet: {peak_tflops: 1, "
                           "memory_bandwidth_gb_s: 1, memory_gb: 1, network_gb_s: 1}}]"),
               "cost_per_hour must be >= 0");
  expect_error(fleet_error("pools: [{name: a, count: 1, cost_per_hour: 1, datasheet: {peak_tflops: .inf, "
                           "memory_bandwidth_gb_s: 1, memory_gb: 1, network_gb_s: 1}}]"),
               "peak_tflops must be positive");
  expect_error(fleet_error("pools: [{name: a, count: 99999999999, cost_per_hour: 1}]"), "not a valid integer");
  expect_error(fleet_error("- 1\n- 2\n"), "mapping");
  expect_error(fleet_error("pool: []"), "missing required key 'pools'");
  Status missing =
      parse_fleet("pools: [{name: a, count: 1, cost_per_hour: 1, profile: nope.yaml}]", "f.yaml", "/nonexistent")
          .status();
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_NE(missing.message().find("nope.yaml"), std::string::npos);
}

TEST(Spec, WorkloadParsesAndGeneratesDeterministically) {
  auto w = parse_workload(kWorkload, "w.yaml", ".");
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ(w->model.config.dim, 768);
  auto r = generate_requests(*w);
  ASSERT_EQ(r.size(), 10u);
  for (size_t i = 0; i < r.size(); ++i) {
    EXPECT_DOUBLE_EQ(r[i].arrival_s, i / 5.0);
    EXPECT_GE(r[i].input_tokens, 10);
    EXPECT_LE(r[i].input_tokens, 20);
    EXPECT_EQ(r[i].output_tokens, 7);
  }
  auto again = generate_requests(*w);
  for (size_t i = 0; i < r.size(); ++i) EXPECT_EQ(again[i].input_tokens, r[i].input_tokens);
}

// A workload may name the checkpoint alone: its config (every family's layer pattern) and its bytes per parameter
// come from the file.
TEST(Spec, WorkloadReadsTheModelFromItsCheckpoint) {
  TS_REQUIRE_STORIES260K();
  const std::string tail = "rate: 1\ninput: {fixed: 8}\noutput: {fixed: 8}\n";
  // stories260K: a llama2.c file of f32 weights, dim 64, 5 layers, 8 heads on 4 KV heads, vocabulary 512.
  auto w = parse_workload("model: {path: " + testing::stories260k_dir() + "}\n" + tail, "w.yaml", ".");
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ(w->model.name, "stories260K");
  EXPECT_EQ(w->model.config.dim, 64);
  EXPECT_EQ(w->model.config.n_layers, 5);
  EXPECT_EQ(w->model.config.n_kv_heads, 4);
  EXPECT_DOUBLE_EQ(w->model.weight_bytes, 4);
  EXPECT_DOUBLE_EQ(w->model.cost().kv_bytes_per_token, 2 * 5 * 32 * 2);  // 4 KV heads of 8, f16 cache
  // The keys still override what the file says.
  w = parse_workload("model: {path: " + testing::stories260k_dir() + ", weight_bytes: 2, name: s}\n" + tail, "w.yaml",
                     ".");
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_DOUBLE_EQ(w->model.weight_bytes, 2);
  EXPECT_EQ(w->model.name, "s");
  // A Gemma 4 file (E2B's pattern at test size): the KV-sharing layers hold no cache, which no key could state.
  auto g = model::gemma4_shape("gemma4-e2b", /*small=*/true);
  ASSERT_TRUE(g.ok());
  const std::string gguf = testing::scratch_dir() + "/g4.gguf";
  ASSERT_TRUE(model::write_gemma4_gguf(*g, 3, {}, gguf).ok());
  w = parse_workload("model: {path: " + gguf + "}\n" + tail, "w.yaml", ".");
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  const model::ModelConfig& c = w->model.config;
  EXPECT_EQ(c.arch, "gemma4");
  EXPECT_EQ(c.shared_kv_layers, g->shared_kv_layers);
  ASSERT_GT(c.shared_kv_layers, 0);
  double own = 0;
  for (int l = 0; l < g->n_layers; ++l)
    if (g->has_kv(l))
      own += 2.0 * (g->is_sliding(l) ? g->head_dim_swa * g->n_kv_heads_swa : g->head_dim_full * g->n_kv_heads_full) * 2;
  EXPECT_DOUBLE_EQ(w->model.cost().kv_bytes_per_token, own);
  // A path that is no model: the error names the key and the loader's reason.
  expect_error(workload_error("model: {path: " + testing::scratch_dir() + "/none.gguf}\n" + tail), "w.yaml.model.path");
}

TEST(Spec, PoissonArrivalsHaveTheStatedRate) {
  auto w = parse_workload(std::string(kWorkload) + "seed: 3\n", "w.yaml", ".");
  ASSERT_TRUE(w.ok());
  w->arrival = "poisson";
  w->requests = 20000;
  auto r = generate_requests(*w);
  EXPECT_NEAR(r.back().arrival_s / r.size(), 1.0 / 5, 0.01);
}

TEST(Spec, WorkloadErrorsNameTheProblem) {
  expect_error(workload_error("rate: 1\ninput: {fixed: 1}\noutput: {fixed: 1}"), "missing required key 'model'");
  expect_error(workload_error("model: {shape: stories9B}\nrate: 1\ninput: {fixed: 1}\noutput: {fixed: 1}"),
               "unknown shape 'stories9B'");
  expect_error(workload_error("model: {dim: 64}\nrate: 1\ninput: {fixed: 1}\noutput: {fixed: 1}"),
               "missing required key 'hidden_dim'");
  expect_error(workload_error("model: {shape: tiny}\nrate: 0\ninput: {fixed: 1}\noutput: {fixed: 1}"), "rate 0");
  expect_error(workload_error("model: {shape: tiny}\nrate: .nan\ninput: {fixed: 1}\noutput: {fixed: 1}"), "rate");
  expect_error(workload_error("model: {shape: tiny}\nrate: 1\ninput: {fixed: 1, uniform: [1, 2]}\noutput: {fixed: 1}"),
               "exactly one of fixed, uniform, normal");
  expect_error(workload_error("model: {shape: tiny}\nrate: 1\ninput: {uniform: [5, 2]}\noutput: {fixed: 1}"),
               "min <= max");
  expect_error(workload_error("model: {shape: tiny}\nrate: 1\narrival: bursty\ninput: {fixed: 1}\noutput: {fixed: 1}"),
               "known: poisson, uniform");
  expect_error(workload_error("model: {shape: tiny}\nrate: 1\ninput: {fixed: 1}"), "missing required key 'output'");
}

TEST(Spec, TraceFile) {
  std::string dir = testing::scratch_dir();
  std::ofstream(dir + "/t.csv") << "arrival_s,input_tokens,output_tokens\n0.0,10,5\n0.5,20,3\n";
  auto w = parse_workload("model: {shape: tiny}\ntrace: t.csv\n", "w.yaml", dir);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  auto r = generate_requests(*w);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[1].input_tokens, 20);
  EXPECT_DOUBLE_EQ(r[1].arrival_s, 0.5);
  std::ofstream(dir + "/bad.csv") << "arrival_s,input_tokens,output_tokens\n0.0;10;5\n";
  expect_error(parse_workload("model: {shape: tiny}\ntrace: bad.csv\n", "w.yaml", dir).status(), "bad.csv:2");
  std::ofstream(dir + "/order.csv") << "1.0,10,5\n0.5,10,5\n";
  expect_error(parse_workload("model: {shape: tiny}\ntrace: order.csv\n", "w.yaml", dir).status(), "must not decrease");
}

TEST(Spec, Slo) {
  auto s = parse_slo("ttft_ms: 500\ntpot_ms: 50\npercentile: 99\n", "s.yaml");
  ASSERT_TRUE(s.ok());
  EXPECT_DOUBLE_EQ(s->ttft_s, 0.5);
  EXPECT_DOUBLE_EQ(s->tpot_s, 0.05);
  EXPECT_DOUBLE_EQ(s->attainment, 0.99);  // defaults to the percentile
  expect_error(parse_slo("ttft_ms: 500\n", "s.yaml").status(), "tpot_ms");
  expect_error(parse_slo("ttft_ms: 500\ntpot_ms: 50\nattainment: 2\n", "s.yaml").status(), "attainment");
  expect_error(parse_slo("ttft_ms: -1\ntpot_ms: 50\n", "s.yaml").status(), "ttft_ms must be positive");
  expect_error(parse_slo("ttft: 1\nttft_ms: 1\ntpot_ms: 1\n", "s.yaml").status(), "unknown key 'ttft'");
}

}  // namespace
}  // namespace tessera::solver

namespace tessera::solver {
namespace {

const char* kLocalFleet = R"(
request_overhead_ms: 2.5
pools:
  - {name: pre, count: 2, cost_per_hour: 1, roles: [prefill],
     launch: {backend: cpu, threads: 2, cpus: [0, 1], args: [--no-prefix-cache]},
     datasheet: {peak_tflops: 1, memory_bandwidth_gb_s: 50, memory_gb: 8, network_gb_s: 5}}
)";

TEST(Spec, LaunchRolesAndOverheadParse) {
  auto f = parse_fleet(kLocalFleet, "f.yaml", ".");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_DOUBLE_EQ(f->request_overhead_s, 0.0025);
  const Pool& p = f->pools[0];
  EXPECT_EQ(p.roles, std::vector<std::string>{"prefill"});
  EXPECT_EQ(p.launch.backend, "cpu");
  EXPECT_EQ(p.launch.threads, 2);
  EXPECT_EQ(p.launch.cpus, (std::vector<int>{0, 1}));
  EXPECT_EQ(p.launch.args, std::vector<std::string>{"--no-prefix-cache"});
  auto w = parse_workload(
      "model: {shape: tiny, path: models/m.bin, tokenizer: models/t.bin}\nrate: 1\n"
      "input: {fixed: 4}\noutput: {fixed: 4}\n",
      "w.yaml", "/base");
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ(w->model.path, "/base/models/m.bin");  // absolute: a launched plan runs from anywhere
  EXPECT_EQ(w->model.tokenizer, "/base/models/t.bin");
}

TEST(Spec, LaunchRolesAndOverheadErrorsNameTheProblem) {
  auto err = [](const std::string& from, const std::string& to) {
    std::string t = kLocalFleet;
    t.replace(t.find(from), from.size(), to);
    return parse_fleet(t, "f.yaml", ".").status().message();
  };
  EXPECT_NE(err("roles: [prefill]", "roles: [prefil]").find("unknown role 'prefil'"), std::string::npos);
  EXPECT_NE(err("cpus: [0, 1]", "cpus: [0, -1]").find("CPU ids must be >= 0"), std::string::npos);
  EXPECT_NE(err("backend: cpu, ", "").find("missing required key 'backend'"), std::string::npos);
  EXPECT_NE(err("threads: 2", "thread: 2").find("unknown key 'thread'"), std::string::npos);
  EXPECT_NE(err("request_overhead_ms: 2.5", "request_overhead_ms: -1").find("request_overhead_ms"), std::string::npos);
  EXPECT_NE(
      err("request_overhead_ms: 2.5", "request_overhead_ms: 2.5\nrequest_overhead_samples_ms: [1, 2]").find("not both"),
      std::string::npos);
  EXPECT_NE(err("request_overhead_ms: 2.5", "request_overhead_samples_ms: [1, -2]").find("every sample"),
            std::string::npos);
  EXPECT_NE(err("request_overhead_ms: 2.5", "token_overhead_ms: -0.5").find("token_overhead_ms"), std::string::npos);
  EXPECT_NE(err("request_overhead_ms: 2.5", "request_overhead_busy_samples_ms: [4]")
                .find("needs request_overhead_samples_ms"),
            std::string::npos);
  EXPECT_NE(err("roles: [prefill]", "roles: [prefill], decode_points: true").find("needs a measured profile"),
            std::string::npos)
      << "a datasheet has no measured points";
  EXPECT_NE(err("roles: [prefill]", "roles: [prefill], prefill_points: true").find("needs a measured profile"),
            std::string::npos);
  EXPECT_NE(err("request_overhead_ms: 2.5", "colocated_slowdown: -0.2").find("colocated_slowdown"), std::string::npos);
}

TEST(Spec, MeasuredServingOverheadsParse) {
  std::string t = kLocalFleet;
  t.replace(t.find("request_overhead_ms: 2.5"), 24,
            "request_overhead_samples_ms: [3, 1.5]\ntoken_overhead_ms: 0.25\nstream_start_overhead_ms: 12");
  auto f = parse_fleet(t, "f.yaml", ".");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->request_overhead_samples_s, (std::vector<double>{0.003, 0.0015}));
  EXPECT_DOUBLE_EQ(f->token_overhead_s, 0.00025);
  EXPECT_DOUBLE_EQ(f->stream_start_overhead_s, 0.012);
  EXPECT_EQ(f->colocated_slowdown, 0.0) << "absent: instances do not affect each other";
}

}  // namespace
}  // namespace tessera::solver
