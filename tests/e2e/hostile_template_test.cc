// A model's chat template is untrusted input (issue 27): whoever publishes a model writes it. Through a real
// `tessera serve`, templates that loop for hours, double a string without end, recurse, or hoard memory each get
// a 400 naming the limit they hit, while /health keeps answering within 100 ms (renders run on the node's
// template pool, not its HTTP io threads) and the node's peak memory stays bounded; a render whose client went
// away stops (the node's CPU goes quiet) instead of running to its budget.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "http/http.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// What the last message says picks the attack; anything else renders a plain prompt.
const char* kTemplate =
    "{% set what = messages[-1].content %}"
    "{% if what == 'loops' %}{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    "{% elif what == 'double' %}{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
    "{% endfor %}"
    "{% elif what == 'recurse' %}{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"
    "{% elif what == 'branch' %}{% macro g(n) %}{% if n > 0 %}{{ g(n - 1) }}{{ g(n - 1) }}{% endif %}{% endmacro %}"
    "{{ g(60) }}"
    "{% elif what == 'hoard' %}{% set ns = namespace(s='x', l=[]) %}{% for i in range(20) %}"
    "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{% for i in range(1000) %}{% set ns.l = ns.l + [ns.s ~ i] %}{% endfor %}"
    "{% endif %}"
    "{% for m in messages %}{{ m.content }}\n{% endfor %}";

std::string write_template(const std::string& dir) {
  const std::string path = dir + "/hostile.jinja";
  std::ofstream(path) << kTemplate;
  return path;
}

// VmHWM (peak resident set) of a process, in MiB; -1 when unreadable.
double peak_rss_mib(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  }
  return -1;
}

// utime + stime of a process, in seconds.
double cpu_seconds(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::istringstream rest(text.substr(text.rfind(')') + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i)
    if (i == 14 || i == 15) ticks += std::stod(field);
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

class HostileTemplate : public ::testing::Test {
 protected:
  void start(std::vector<std::string> extra = {}) {
    std::vector<std::string> argv{testing::tessera_bin(),
                                  "serve",
                                  "--model",
                                  testing::stories260k_dir(),
                                  "--port",
                                  "0",
                                  "--kv-memory",
                                  "64",
                                  "--chat-template",
                                  write_template(testing::scratch_dir())};
    argv.insert(argv.end(), extra.begin(), extra.end());
    proc_ = std::make_unique<testing::BackgroundProcess>(argv);
    const int port = testing::port_from_line(proc_->wait_for_line("listening on"));
    ASSERT_GT(port, 0);
    url_ = "http://127.0.0.1:" + std::to_string(port);
  }
  Result<http::Response> chat(const std::string& content, int timeout_ms = 120000) {
    const json body = {{"model", "stories260K"},
                       {"messages", {{{"role", "user"}, {"content", content}}}},
                       {"max_tokens", 4},
                       {"temperature", 0}};
    return http::fetch({.method = "POST",
                        .url = url_ + "/v1/chat/completions",
                        .headers = {{"Content-Type", "application/json"}},
                        .body = body.dump(),
                        .timeout_ms = timeout_ms});
  }
  std::string url_;
  std::unique_ptr<testing::BackgroundProcess> proc_;
};

TEST_F(HostileTemplate, EachAttackIsA400NamingItsLimitWhileHealthStaysFast) {
  TS_REQUIRE_STORIES260K();
  ASSERT_NO_FATAL_FAILURE(start());
  // /health every 20 ms for as long as the attacks run. A probe served behind a render would wait for it, and with
  // renders on the io threads most probes of the attack window would; a probe or two may lose its core to the
  // scheduler of a two-core machine running two renders and, under ctest -j2, another test (one took 107 ms in CI on
  // 2026-12-06), so one slow probe in twenty is allowed, no failed one.
  std::atomic<bool> done{false};
  std::atomic<int> slow{0}, failed{0}, probes{0};
  std::atomic<double> worst_ms{0};
  std::thread prober([&] {
    while (!done) {
      const auto t0 = Clock::now();
      auto r = http::fetch({.url = url_ + "/health", .timeout_ms = 5000});
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      ++probes;
      if (!r.ok() || r->status != 200) ++failed;
      if (ms > 100) ++slow;
      if (ms > worst_ms) worst_ms = ms;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  const std::vector<std::pair<std::string, std::string>> attacks = {
      {"loops", "step limit"},   {"double", "grew past"}, {"recurse", "calls nest deeper"}, {"branch", "step limit"},
      {"hoard", "memory limit"}, {"loops", "step limit"}, {"double", "grew past"}};
  std::vector<std::future<void>> replies;
  for (const auto& [what, limit] : attacks) {
    replies.push_back(std::async(std::launch::async, [this, what = what, limit = limit] {
      const auto t0 = Clock::now();
      auto r = chat(what);
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      ASSERT_TRUE(r.ok()) << what << ": " << r.status().to_string();
      EXPECT_EQ(r->status, 400) << what << ": " << r->body;
      json j = json::parse(r->body, nullptr, false);
      ASSERT_TRUE(j.contains("error")) << r->body;
      EXPECT_NE(j["error"]["message"].get<std::string>().find(limit), std::string::npos) << what << ": " << r->body;
      EXPECT_EQ(j["error"]["param"], "messages") << r->body;
      // Seven attacks on two template threads of a two-core machine: each stops at its budget (about a second).
      EXPECT_LT(s, 60.0) << what;
    }));
  }
  for (auto& f : replies) f.get();
  // A well-behaved conversation still renders and generates.
  auto ok = chat("Once upon a time");
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->status, 200) << ok->body;
  done = true;
  prober.join();
  EXPECT_GT(probes.load(), 10);
  EXPECT_EQ(failed.load(), 0);
  EXPECT_LE(slow.load() * 20, probes.load())
      << slow.load() << " probes over 100 ms, slowest " << worst_ms.load() << " ms of " << probes.load() << " probes";
  const double peak = peak_rss_mib(proc_->pid());
  // Two renders at a time, each under its 256 MiB budget of values built, beside a 1 MB model and 64 MiB of KV.
  EXPECT_GT(peak, 0);
  EXPECT_LT(peak, 800.0) << "peak RSS of the node";
  std::printf("hostile templates: %d /health probes, %d over 100 ms, slowest %.1f ms; node peak RSS %.0f MiB\n",
              probes.load(), slow.load(), worst_ms.load(), peak);
}

TEST_F(HostileTemplate, ARenderStopsWhenItsClientGoesAway) {
  TS_REQUIRE_STORIES260K();
  // A budget that would let the nested loops run for many minutes: only the disconnect can stop them.
  ASSERT_NO_FATAL_FAILURE(start({"--template-max-steps", "1000000000000"}));
  auto r = chat("loops", /*timeout_ms=*/500);
  EXPECT_FALSE(r.ok() && r->status == 200);  // the client gave up
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const double c0 = cpu_seconds(proc_->pid());
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const double busy = cpu_seconds(proc_->pid()) - c0;
  EXPECT_LT(busy, 0.3) << "the node kept computing for " << busy << " s of CPU in 2 s after its client left";
  auto ok = chat("Once upon a time");
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->status, 200) << ok->body;
}

}  // namespace
}  // namespace tessera
