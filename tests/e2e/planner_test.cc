// The planner with real processes (issue 18). `tessera up` with the planner on starts 2 prefill + 1 decode
// nodes of stories260K; under a short-prompt / long-answer load the planner (measured profile, simulator)
// re-roles them within a few windows, with every request served and every token matching a run without it;
// its decisions are in its /status (behind the cluster credential) and /metrics. `tessera plan` next to a
// cluster holds while the cluster is idle, and says so when the control plane goes away.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/cluster_token.h"
#include "http/http.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using testing::BackgroundProcess;
using testing::tessera_bin;

http::Response get(const std::string& url, const std::string& token) {
  http::ClientRequest r;
  r.url = url;
  r.timeout_ms = 5000;
  if (!token.empty()) r.headers[std::string(kClusterTokenHeader)] = token;
  auto res = http::fetch(r);
  EXPECT_TRUE(res.ok()) << url << ": " << res.status().message();
  return res.ok() ? *res : http::Response{};
}

std::string after(const std::string& line, const std::string& marker) {
  size_t at = line.find(marker);
  if (at == std::string::npos) return "";
  at += marker.size();
  size_t end = line.find_first_of(" )\n", at);
  return line.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

// The planner's inputs: a profile of this machine's cpu backend, one pool of 3 nodes, the model, the SLO.
void write_specs(const std::string& dir) {
  auto prof = testing::run_process({tessera_bin(),  "profile", "--model",        testing::stories260k_dir(),
                                    "--backend",    "cpu",     "--threads",      "1",
                                    "--memory-gb",  "1",       "--network-gb-s", "1",
                                    "--max-tokens", "480",     "--max-batch",    "8",
                                    "--repeats",    "1",       "--out",          dir + "/cpu.yaml"},
                                   120);
  ASSERT_EQ(prof.exit_code, 0) << prof.err;
  std::ofstream(dir + "/fleet.yaml")
      << "pools:\n  - {name: cpu, count: 3, cost_per_hour: 1, profile: cpu.yaml, batch_limits: [16], launch: "
         "{backend: cpu, threads: 1}}\nrequest_overhead_ms: 3\ntoken_overhead_ms: 0.3\ncolocated_slowdown: 0.3\n";
  std::ofstream(dir + "/workload.yaml")
      << "model: {name: stories260K, dim: 64, hidden_dim: 172, n_layers: 5, n_heads: 8, n_kv_heads: 4,\n"
         "        vocab_size: 512, max_seq_len: 512, weight_bytes: 4, kv_bytes: 4, path: "
      << testing::stories260k_dir() << "}\nrate: 1\ninput: {fixed: 16}\noutput: {fixed: 16}\n";
  std::ofstream(dir + "/slo.yaml") << "ttft_ms: 250\ntpot_ms: 15\n";
}

TEST(PlannerE2E, UpWithThePlannerReRolesNodesUnderLoadWithNoTokenLost) {
  TS_REQUIRE_STORIES260K();
  const std::string dir = testing::scratch_dir();
  write_specs(dir);
  std::ofstream(dir + "/cluster.yaml")
      << "model: " << testing::stories260k_dir() << "\nrouter: {port: 0}\nnodes:\n"
      << "  - {name: p0, role: prefill, backend: cpu, threads: 1, args: [--pd-min-tokens, \"1\", --kv-dtype, f32]}\n"
      << "  - {name: p1, role: prefill, backend: cpu, threads: 1, args: [--pd-min-tokens, \"1\", --kv-dtype, f32]}\n"
      << "  - {name: d0, role: decode, backend: cpu, threads: 1, args: [--pd-min-tokens, \"1\", --kv-dtype, f32]}\n"
      << "planner: {fleet: fleet.yaml, workload: workload.yaml, slo: slo.yaml, interval_s: 1, windows_to_act: 2,\n"
      << "          cooldown_s: 5, min_gain: 0.15, min_requests: 8}\n";
  BackgroundProcess up({tessera_bin(), "up", dir + "/cluster.yaml"});
  const std::string planner_line = up.wait_for_line("planner at", 120);
  const std::string ready = up.wait_for_line("cluster ready", 120);
  ASSERT_FALSE(ready.empty()) << "the cluster did not start";
  const std::string planner = after(planner_line, "planner at ");
  const std::string api = after(ready, "OpenAI API at ");
  const std::string router = api.substr(0, api.size() - 3);  // without /v1
  std::string token;
  std::ifstream(after(ready, "logs in ") + "/cluster-token") >> token;
  ASSERT_FALSE(planner.empty());
  ASSERT_FALSE(token.empty());
  // /status is the cluster's; /metrics is open like every /metrics.
  EXPECT_EQ(get(planner + "/status", "").status, 401);
  EXPECT_EQ(get(planner + "/metrics", "").status, 200);

  // The reference: the same requests on a plain node like the cluster's (greedy: the same tokens wherever they
  // are computed), with the cluster's f32 cache: an f16 cache rounds near ties differently on this tiny model.
  BackgroundProcess solo({tessera_bin(), "serve", "--model", testing::stories260k_dir(), "--port", "0", "--backend",
                          "cpu", "--threads", "1", "--kv-dtype", "f32"});
  const int solo_port = testing::port_from_line(solo.wait_for_line("listening on", 60));
  ASSERT_GT(solo_port, 0);
  auto load = [&](const std::string& url, std::vector<std::string> extra) {
    std::vector<std::string> args = {tessera_bin(), "fault-load", "--url",        url,  "--clients", "4",
                                     "--requests",  "150",        "--max-tokens", "120"};
    args.insert(args.end(), extra.begin(), extra.end());
    return testing::run_process(args, 600);
  };
  const std::string ref = dir + "/ref.jsonl";
  ASSERT_EQ(load("http://127.0.0.1:" + std::to_string(solo_port), {"--write-reference", ref}).exit_code, 0);
  auto r = load(router, {"--reference", ref});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json s = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(s.is_object()) << r.out;
  std::fprintf(stderr, "load under the planner: %s\n", r.out.c_str());
  EXPECT_EQ(s["completed"], 600) << r.out;
  EXPECT_EQ(s["failed"], 0) << r.out;
  EXPECT_EQ(s["lost_tokens"], 0) << r.out;
  EXPECT_EQ(s["duplicated_tokens"], 0) << r.out;

  // Long answers want colocated nodes (the simulator predicts 3 `both` nodes far better than 2P+1D).
  json st = json::parse(get(planner + "/status", token).body, nullptr, false);
  ASSERT_TRUE(st.is_object());
  int reroles = 0;
  for (const json& d : st["decisions"]) {
    for (const char* k : {"ts_ms", "action", "node", "from", "to", "reason", "predicted_gain", "applied"})
      EXPECT_TRUE(d.contains(k)) << d.dump();
    if (d["action"] == "re-role" && d["applied"].get<bool>()) {
      ++reroles;
      EXPECT_GT(d["predicted_gain"].get<double>(), 0.15) << d.dump();
    }
  }
  EXPECT_GT(reroles, 0) << st.dump(2);
  EXPECT_NE(get(planner + "/metrics", "").body.find("tessera_planner_actions_total{applied=\"true\"}"),
            std::string::npos);
  EXPECT_EQ(up.stop(SIGTERM, 60), 0);
}

TEST(PlannerE2E, PlanHoldsOnAnIdleClusterAndSaysWhenTheControlPlaneIsGone) {
  TS_REQUIRE_STORIES260K();
  const std::string dir = testing::scratch_dir();
  write_specs(dir);
  const std::string token_file = dir + "/cluster-token";
  auto token = ClusterToken::create(token_file);
  ASSERT_TRUE(token.ok());
  auto ctrl = std::make_unique<BackgroundProcess>(
      std::vector<std::string>{tessera_bin(), "ctrl", "--port", "0", "--cluster-token-file", token_file});
  const int ctrl_port = testing::port_from_line(ctrl->wait_for_line("listening on", 30));
  ASSERT_GT(ctrl_port, 0);
  const std::string ctrl_url = "http://127.0.0.1:" + std::to_string(ctrl_port);
  BackgroundProcess node({tessera_bin(), "serve", "--model", testing::stories260k_dir(), "--port", "0", "--ctrl",
                          ctrl_url, "--role-switchable", "--cluster-token-file", token_file});
  ASSERT_GT(testing::port_from_line(node.wait_for_line("listening on", 60)), 0);
  BackgroundProcess plan({tessera_bin(), "plan", "--ctrl", ctrl_url, "--fleet", dir + "/fleet.yaml", "--workload",
                          dir + "/workload.yaml", "--slo", dir + "/slo.yaml", "--interval", "0.3",
                          "--cluster-token-file", token_file});
  const std::string url =
      "http://127.0.0.1:" + std::to_string(testing::port_from_line(plan.wait_for_line("listening on", 30)));
  auto status = [&] { return json::parse(get(url + "/status", token->secret()).body, nullptr, false); };
  auto wait_reason = [&](const std::string& needle) {
    for (int i = 0; i < 100; ++i) {
      json s = status();
      if (s.is_object() && s["reason"].get<std::string>().find(needle) != std::string::npos) return s;
      std::this_thread::sleep_for(100ms);
    }
    return status();
  };
  json idle = wait_reason("requests finished in the window");
  EXPECT_EQ(idle["state"], "holding") << idle.dump();
  EXPECT_NE(idle["reason"].get<std::string>().find("requests finished in the window"), std::string::npos)
      << idle.dump();
  EXPECT_EQ(get(url + "/status", "").status, 401);
  // The control plane goes away: the planner holds, and says why.
  ctrl->stop(SIGKILL);
  json lost = wait_reason("control plane unreachable");
  EXPECT_EQ(lost["state"], "holding") << lost.dump();
  EXPECT_NE(lost["reason"].get<std::string>().find("control plane unreachable"), std::string::npos) << lost.dump();
  bool recorded = false;
  for (const json& d : lost["decisions"]) {
    recorded |= d["action"] == "keep" && d["reason"].get<std::string>().find("control plane") != std::string::npos;
    EXPECT_NE(d["action"], "re-role");
  }
  EXPECT_TRUE(recorded) << lost.dump();
  EXPECT_NE(get(url + "/metrics", "").body.find("tessera_planner_state{state=\"holding\"} 1"), std::string::npos);
}

}  // namespace
}  // namespace tessera
