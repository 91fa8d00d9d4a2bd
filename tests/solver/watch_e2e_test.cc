// `tessera solve --watch URL` against a fake router: an HTTP server whose /metrics names one node, whose
// metrics first match the plan's workload and then show ten times the rate with TTFT far above the SLO.
// The watcher must keep the plan while the workload matches, and re-place it (to more instances) once the
// violation has held for the hysteresis windows.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <mutex>

#include <fmt/core.h>

#include "http/http.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera::testing {
namespace {

// Node metrics as a function of time: 2 requests/s of 64/32 tokens, first tokens within 25-50 ms and 6 ms
// between tokens (what the plan predicts), then 20 requests/s whose first token takes 1-2.5 s. The switch
// happens at the `calm_scrapes`-th scrape of the node, so the calm windows do not depend on how fast the
// watcher starts.
class FakeCluster {
 public:
  explicit FakeCluster(int calm_scrapes) : calm_scrapes_(calm_scrapes), t0_(std::chrono::steady_clock::now()) {
    server_ = std::make_unique<http::Server>(http::ServerOptions{});
    server_->route("GET", "/metrics", [this](const http::Request&, const std::shared_ptr<http::ResponseWriter>& w) {
      w->send(200,
              fmt::format("# TYPE tessera_router_node_healthy gauge\n"
                          "tessera_router_node_healthy{{node=\"http://127.0.0.1:{}/n0\"}} 1\n"
                          "tessera_router_requests_total{{endpoint=\"completions\",status=\"200\"}} 7\n",
                          server_->port()),
              "text/plain");
    });
    server_->route("GET", "/n0/metrics", [this](const http::Request&, const std::shared_ptr<http::ResponseWriter>& w) {
      w->send(200, node_metrics(), "text/plain");
    });
    EXPECT_TRUE(server_->start().ok());
  }
  std::string url() const { return fmt::format("http://127.0.0.1:{}", server_->port()); }

 private:
  std::string node_metrics() {
    std::lock_guard<std::mutex> lock(mu_);
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    if (++scrapes_ == calm_scrapes_) switch_s_ = t;  // busy from this scrape on (it still reads calm)
    double calm = 2 * std::min(t, switch_s_), busy = 20 * std::max(0.0, t - switch_s_);
    double n = calm + busy;
    std::string s = "# HELP tessera_requests_total Requests\n# TYPE tessera_requests_total counter\n";
    s += fmt::format("tessera_requests_total{{endpoint=\"completions\",model=\"m\",status=\"200\"}} {}\n", n);
    s += "tessera_requests_total{endpoint=\"completions\",model=\"m\",status=\"400\"} 3\n";
    s += fmt::format("tessera_prompt_tokens_total{{model=\"m\"}} {}\n", 64 * n);
    s += fmt::format("tessera_generation_tokens_total{{model=\"m\"}} {}\n", 32 * n);
    const double bounds[] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
    for (double b : bounds) {
      double c = (b >= 0.025 ? 0.7 * calm : 0) + (b >= 0.05 ? 0.3 * calm : 0) + (b >= 2.5 ? busy : 0);
      s += fmt::format("tessera_time_to_first_token_seconds_bucket{{model=\"m\",le=\"{}\"}} {}\n", b, c);
    }
    s += fmt::format("tessera_time_to_first_token_seconds_bucket{{model=\"m\",le=\"+Inf\"}} {}\n", n);
    s += fmt::format("tessera_time_to_first_token_seconds_sum{{model=\"m\"}} {}\n", 0.03 * calm + 2 * busy);
    s += fmt::format("tessera_time_to_first_token_seconds_count{{model=\"m\"}} {}\n", n);
    s += fmt::format("tessera_inter_token_latency_seconds_sum{{model=\"m\"}} {}\n", 31 * (calm * 0.006 + busy * 0.004));
    s += fmt::format("tessera_inter_token_latency_seconds_count{{model=\"m\"}} {}\n", 31 * n);
    return s;
  }

  std::mutex mu_;
  int calm_scrapes_;
  int scrapes_ = 0;
  double switch_s_ = 1e9;
  std::chrono::steady_clock::time_point t0_;
  std::unique_ptr<http::Server> server_;
};

TEST(SolveWatch, KeepsAMatchingPlanAndRePlacesAfterAHeldViolation) {
  std::string dir = scratch_dir();
  std::ofstream(dir + "/fleet.yaml") << R"(pools:
  - name: small
    count: 8
    cost_per_hour: 1
    batch_limits: [16]
    datasheet: {peak_tflops: 0.05, memory_bandwidth_gb_s: 10, memory_gb: 1, network_gb_s: 1}
)";
  std::ofstream(dir + "/workload.yaml")
      << "model: {shape: stories15M}\nrate: 2\nrequests: 120\ninput: {fixed: 64}\noutput: {fixed: 32}\n";
  std::ofstream(dir + "/slo.yaml") << "ttft_ms: 300\ntpot_ms: 50\n";
  FakeCluster cluster(4);  // the first scrape and three windows are calm
  ProcessResult r =
      run_process({tessera_bin(), "solve", "--fleet", dir + "/fleet.yaml", "--workload", dir + "/workload.yaml",
                   "--slo", dir + "/slo.yaml", "--watch", cluster.url(), "--interval", "0.4", "--windows", "10"},
                  120);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  std::vector<std::string> lines;
  for (size_t at = r.out.find("[t="); at != std::string::npos; at = r.out.find("[t=", at + 1))
    lines.push_back(r.out.substr(at, r.out.find('\n', at) - at));
  ASSERT_EQ(lines.size(), 10u) << r.out;
  // Calm windows: the plan is kept without a trigger.
  for (int i = 0; i < 3; ++i) {
    // The fake cluster's counters follow wall time: the measured rate is 2/s within a window's timing jitter.
    const size_t at = lines[i].find("] keep: rate ");
    ASSERT_NE(at, std::string::npos) << lines[i];
    const double rate = std::strtod(lines[i].c_str() + at + 13, nullptr);
    EXPECT_NEAR(rate, 2.0, 0.1) << lines[i];
    EXPECT_EQ(lines[i].find("above"), std::string::npos) << lines[i];
    EXPECT_EQ(lines[i].find("re-profile"), std::string::npos) << lines[i];
  }
  // Busy windows: kept (with reasons) until the violation has held for three windows, then re-placed once.
  int first_replace = -1, replaces = 0;
  for (int i = 0; i < 10; ++i) {
    if (lines[i].find("] re-place: ") != std::string::npos) {
      ++replaces;
      if (first_replace < 0) first_replace = i;
    }
  }
  ASSERT_GE(first_replace, 0) << r.out;
  EXPECT_EQ(replaces, 1) << r.out;       // cooldown: no second switch right after the first
  EXPECT_GE(first_replace, 5) << r.out;  // three violated windows after the switch
  EXPECT_NE(lines[first_replace].find("TTFT 2350 ms above 300 ms"), std::string::npos) << lines[first_replace];
  EXPECT_NE(lines[first_replace - 1].find("keep: "), std::string::npos) << lines[first_replace - 1];
  EXPECT_NE(lines[first_replace - 1].find("TTFT"), std::string::npos) << lines[first_replace - 1];
}

TEST(SolveWatch, AnUnreachableClusterIsReportedNotFatal) {
  std::string dir = scratch_dir();
  std::ofstream(dir + "/fleet.yaml") << "pools:\n  - {name: a, count: 2, cost_per_hour: 1, batch_limits: [16],\n"
                                        "     datasheet: {peak_tflops: 1, memory_bandwidth_gb_s: 50, memory_gb: 1, "
                                        "network_gb_s: 1}}\n";
  std::ofstream(dir + "/workload.yaml")
      << "model: {shape: stories15M}\nrate: 2\nrequests: 50\ninput: {fixed: 64}\noutput: {fixed: 32}\n";
  std::ofstream(dir + "/slo.yaml") << "ttft_ms: 300\ntpot_ms: 50\n";
  ProcessResult r =
      run_process({tessera_bin(), "solve", "--fleet", dir + "/fleet.yaml", "--workload", dir + "/workload.yaml",
                   "--slo", dir + "/slo.yaml", "--watch", "http://127.0.0.1:1", "--interval", "0.1", "--windows", "2"},
                  60);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("keep: no metrics"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace tessera::testing
