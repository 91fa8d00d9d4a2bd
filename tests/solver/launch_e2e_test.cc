// A plan is a cluster: `tessera profile` (tiny) -> `tessera solve --out plan.yaml` -> `tessera up plan.yaml`
// -> a real completion through the router, prefilled on the plan's prefill node and decoded on its decode
// node. Also: a plan for pools that do not exist here says so, and `tessera up` refuses it with the reason.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <signal.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "http/http.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera::testing {
namespace {

using json = nlohmann::json;

const char* kWorkload = R"(model: {name: stories260K, dim: 64, hidden_dim: 172, n_layers: 5, n_heads: 8, n_kv_heads: 4,
        vocab_size: 512, max_seq_len: 512, weight_bytes: 4, kv_bytes: 4, path: MODEL}
rate: 2
requests: 40
input: {uniform: [40, 80]}
output: {uniform: [4, 16]}
)";

std::string workload_text() {
  std::string w = kWorkload;
  w.replace(w.find("MODEL"), 5, stories260k_dir());
  return w;
}

// The sample value of `name` in a Prometheus exposition, or -1.
double sample(const std::string& text, const std::string& name) {
  size_t at = text.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stod(text.substr(at + name.size() + 2));
}

TEST(SolveLaunch, ProfileSolveUpAnswersThroughThePlannedPrefillAndDecodeNodes) {
  TS_REQUIRE_STORIES260K();
  std::string dir = scratch_dir();
  ProcessResult prof = run_process({tessera_bin(),  "profile", "--model",        stories260k_dir(),
                                    "--backend",    "cpu",     "--threads",      "1",
                                    "--memory-gb",  "1",       "--network-gb-s", "1",
                                    "--max-tokens", "32",      "--max-batch",    "2",
                                    "--repeats",    "1",       "--out",          dir + "/cpu.yaml"});
  ASSERT_EQ(prof.exit_code, 0) << prof.err;
  // Two one-device pools of this machine's cpu backend; roles pin a disaggregated plan.
  std::ofstream(dir + "/fleet.yaml") << R"(pools:
  - {name: pre, count: 1, cost_per_hour: 1, profile: cpu.yaml, roles: [prefill], batch_limits: [8],
     launch: {backend: cpu, threads: 1, cpus: [0]}}
  - {name: dec, count: 1, cost_per_hour: 1, profile: cpu.yaml, roles: [decode], batch_limits: [8],
     launch: {backend: cpu, threads: 1, cpus: [1]}}
)";
  std::ofstream(dir + "/workload.yaml") << workload_text();
  std::ofstream(dir + "/slo.yaml") << "ttft_ms: 5000\ntpot_ms: 500\n";
  std::string plan = dir + "/plan.yaml";
  ProcessResult solve = run_process({tessera_bin(), "solve", "--fleet", dir + "/fleet.yaml", "--workload",
                                     dir + "/workload.yaml", "--slo", dir + "/slo.yaml", "--out", plan});
  ASSERT_EQ(solve.exit_code, 0) << solve.err;
  EXPECT_NE(solve.out.find("plan: pre: prefill x1 batch 8; dec: decode x1 batch 8"), std::string::npos) << solve.out;
  YAML::Node y = YAML::LoadFile(plan);
  ASSERT_TRUE(y["launchable"].as<bool>());
  ASSERT_EQ(y["nodes"].size(), 2u);
  EXPECT_EQ(y["nodes"][0]["role"].as<std::string>(), "prefill");
  EXPECT_EQ(y["nodes"][1]["role"].as<std::string>(), "decode");

  BackgroundProcess up({tessera_bin(), "up", plan, "--port", "0"});
  ASSERT_TRUE(up.started());
  std::string ready = up.wait_for_line("cluster ready", 90);
  ASSERT_FALSE(ready.empty()) << "tessera up did not become ready";
  size_t at = ready.find("http://");
  size_t end = ready.find("/v1", at);
  ASSERT_NE(end, std::string::npos) << ready;
  std::string url = ready.substr(at, end - at);

  auto r = http::fetch({.method = "POST",
                        .url = url + "/v1/completions",
                        .headers = {{"Content-Type", "application/json"}},
                        .body = json{
                            {"model", "stories260K"},
                            {"prompt", "Once upon a time, there was a little girl named"},
                            {"max_tokens", 12},
                            {"temperature",
                             0}}.dump()});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->status, 200) << r->body;
  json body = json::parse(r->body);
  EXPECT_EQ(body["usage"]["completion_tokens"].get<int>(), 12);
  EXPECT_FALSE(body["choices"][0]["text"].get<std::string>().empty());

  // The request went the planned way: the router knows the decode and the prefill node (it pairs them), and
  // the decode node had the prompt prefilled remotely.
  auto m = http::fetch({.url = url + "/metrics"});
  ASSERT_TRUE(m.ok());
  const std::string key = "tessera_router_node_healthy{node=\"";
  int nodes = 0, remote = 0;
  for (size_t at = m->body.find(key); at != std::string::npos; at = m->body.find(key, at + 1)) {
    const size_t from = at + key.size();
    const std::string node_url = m->body.substr(from, m->body.find('"', from) - from);
    auto nm = http::fetch({.url = node_url + "/metrics"});
    ASSERT_TRUE(nm.ok()) << node_url;
    ++nodes;
    if (nm->body.find("tessera_pd_requests_total{path=\"remote\"}") != std::string::npos)
      remote += static_cast<int>(sample(nm->body, "tessera_pd_requests_total{path=\"remote\"}"));
  }
  EXPECT_EQ(nodes, 2) << m->body;
  EXPECT_EQ(remote, 1) << "the decode node prefilled the prompt on the prefill node";
  EXPECT_EQ(up.stop(SIGTERM, 30), 0);
}

TEST(SolveLaunch, APlanForPoolsElsewhereIsRefusedWithTheReason) {
  std::string dir = scratch_dir();
  std::ofstream(dir + "/fleet.yaml") << R"(pools:
  - {name: h100, count: 2, cost_per_hour: 4, batch_limits: [32],
     datasheet: {peak_tflops: 989, memory_bandwidth_gb_s: 3350, memory_gb: 80, network_gb_s: 50}}
)";
  std::ofstream(dir + "/workload.yaml")
      << "model: {shape: stories15M}\nrate: 2\nrequests: 30\ninput: {fixed: 64}\noutput: {fixed: 16}\n";
  std::ofstream(dir + "/slo.yaml") << "ttft_ms: 1000\ntpot_ms: 100\n";
  std::string plan = dir + "/plan.yaml";
  ProcessResult solve = run_process({tessera_bin(), "solve", "--fleet", dir + "/fleet.yaml", "--workload",
                                     dir + "/workload.yaml", "--slo", dir + "/slo.yaml", "--out", plan});
  ASSERT_EQ(solve.exit_code, 0) << solve.err;
  YAML::Node y = YAML::LoadFile(plan);
  EXPECT_FALSE(y["launchable"].as<bool>());
  EXPECT_NE(y["launch_note"].as<std::string>().find("no 'path'"), std::string::npos);
  ProcessResult up = run_process({tessera_bin(), "up", plan, "--port", "0"}, 30);
  EXPECT_EQ(up.exit_code, 1);
  EXPECT_NE(up.err.find("cannot be launched here"), std::string::npos) << up.err;
}

}  // namespace
}  // namespace tessera::testing
