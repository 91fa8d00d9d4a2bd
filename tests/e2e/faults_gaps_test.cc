// The fault gaps of issue 20 item 5, with real processes: a hung (SIGSTOPped) prefill node costs a decode node
// one --pd-timeout-ms, not one per request (the breaker, serve/prefill_breaker.h); a prefill node's HTTP face
// stays responsive while peers it must connect to never answer; drain is not failure; a PD decode node under
// KV pressure queues instead of refusing; a full node answers 429 before a stream and the router retries it.
// The load versions are in scripts/fault-suite.sh.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

#include "http/http.h"
#include "support/node_http.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::BackgroundProcess;
using testing::complete_greedy;
using testing::scrape_metric;
using testing::tessera_bin;

struct Proc {
  std::unique_ptr<BackgroundProcess> proc;
  std::string url;
};

Proc start(std::vector<std::string> args) {
  std::vector<std::string> argv = {tessera_bin()};
  argv.insert(argv.end(), args.begin(), args.end());
  Proc p;
  p.proc = std::make_unique<BackgroundProcess>(argv);
  const int port = testing::port_from_line(p.proc->wait_for_line("listening on"));
  EXPECT_GT(port, 0) << args[0];
  p.url = "http://127.0.0.1:" + std::to_string(port);
  return p;
}

Proc start_node(std::vector<std::string> extra) {
  std::vector<std::string> a = {"serve", "--model", testing::stories260k_dir(), "--port", "0"};
  a.insert(a.end(), extra.begin(), extra.end());
  return start(a);
}

std::string reference(const std::string& prompt, int n) {
  auto r = testing::run_process({tessera_bin(), "generate", "--model", testing::stories260k_dir(), "--prompt", prompt,
                                 "--max-tokens", std::to_string(n), "--temperature", "0", "--no-echo", "--quiet"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.out.substr(0, r.out.size() - 1);
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

class FaultGaps : public ::testing::Test {
 protected:
  void SetUp() override { TS_REQUIRE_STORIES260K(); }
};

// A SIGSTOPped prefill node accepts connections (the kernel does) and never answers. With the breaker the first
// request to find it hung waits --pd-timeout-ms and falls back; the others, concurrent or later, do not wait on
// it. After SIGCONT a probe finds it and requests go remote again.
TEST_F(FaultGaps, AHungPrefillNodeCostsOneTimeoutNotOnePerRequest) {
  constexpr int kTimeoutMs = 2000;
  Proc prefill = start_node({"--role", "prefill"});
  Proc decode = start_node({"--role", "decode", "--prefill-nodes", prefill.url, "--pd-min-tokens", "4",
                            "--pd-timeout-ms", std::to_string(kTimeoutMs)});
  auto prompt = [](int i) {
    return "Once upon a time, there was a little girl named Lily. She saw " + std::to_string(i);
  };
  EXPECT_EQ(complete_greedy(decode.url, prompt(100), 8), reference(prompt(100), 8));
  ASSERT_EQ(scrape_metric(decode.url, "tessera_pd_requests_total{path=\"remote\"}"), 1.0);

  ASSERT_EQ(kill(prefill.proc->pid(), SIGSTOP), 0);
  // Three concurrent requests meet the hung node first, then ten in a row.
  const auto t0 = Clock::now();
  std::vector<double> took(13);
  std::vector<std::string> got(13);
  {
    std::vector<std::thread> ts;
    for (int i = 0; i < 3; ++i) {
      ts.emplace_back([&, i] {
        const auto s = Clock::now();
        got[i] = complete_greedy(decode.url, prompt(i), 8);
        took[i] = seconds_since(s);
      });
    }
    for (auto& t : ts) t.join();
  }
  for (int i = 3; i < 13; ++i) {
    const auto s = Clock::now();
    got[i] = complete_greedy(decode.url, prompt(i), 8);
    took[i] = seconds_since(s);
  }
  const double total = seconds_since(t0);
  for (int i = 0; i < 13; ++i) EXPECT_EQ(got[i], reference(prompt(i), 8)) << i;
  int slow = 0;
  for (int i = 0; i < 13; ++i) slow += took[i] > kTimeoutMs / 2000.0 ? 1 : 0;
  std::printf("13 requests with the prefill node hung: %.2f s in all; %d waited more than half the timeout\n", total,
              slow);
  EXPECT_LE(slow, 3) << "only the requests already waiting when it hung may wait (together, one timeout)";
  for (int i = 3; i < 13; ++i) EXPECT_LT(took[i], kTimeoutMs / 2000.0) << "request " << i << " waited on the hung node";
  EXPECT_LT(total, kTimeoutMs / 1000.0 + 10 * 0.8) << "one timeout in all, not one per request";
  EXPECT_EQ(scrape_metric(decode.url, "tessera_pd_requests_total{path=\"fallback\"}"), 13.0);
  EXPECT_GE(scrape_metric(decode.url, "tessera_pd_breaker_opened_total"), 1.0);
  EXPECT_GE(scrape_metric(decode.url, "tessera_pd_breaker_skipped_total"), 10.0);

  // Back: the probe (1 s after its first failure, then 2 s, ...) finds it and a request goes remote again.
  ASSERT_EQ(kill(prefill.proc->pid(), SIGCONT), 0);
  const auto t1 = Clock::now();
  double remote = 1;
  for (int i = 0; remote < 2 && seconds_since(t1) < 15; ++i) {
    std::this_thread::sleep_for(200ms);
    EXPECT_EQ(complete_greedy(decode.url, prompt(200 + i), 8), reference(prompt(200 + i), 8));
    remote = scrape_metric(decode.url, "tessera_pd_requests_total{path=\"remote\"}");
  }
  EXPECT_EQ(remote, 2.0) << "the prefill node was never tried again after SIGCONT";
  std::printf("back in use %.1f s after SIGCONT\n", seconds_since(t1));
}

// A listening socket that never accepts: connecting succeeds (the kernel's backlog) and nothing is ever said.
struct SilentListener {
  int fd = -1;
  int port = 0;
  SilentListener() {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0 || listen(fd, 16) != 0) return;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~SilentListener() { close(fd); }
};

// Two prefill calls naming a decode agent that never answers used to hold both HTTP I/O threads of the
// prefill node for the link's connect timeout (5 s): /health must still answer at once.
TEST_F(FaultGaps, APrefillNodeAnswersWhilePeersItConnectsToNeverAnswer) {
  Proc prefill = start_node({"--role", "prefill"});
  SilentListener ghost;
  ASSERT_GT(ghost.port, 0);
  auto info = http::fetch({.method = "GET", .url = prefill.url + "/internal/pd/info"});
  ASSERT_TRUE(info.ok());
  const json model = json::parse(info->body)["model"];
  auto call = [&](int i) {
    const std::string agent = "ghost" + std::to_string(i);
    return http::fetch(
        {.method = "POST",
         .url = prefill.url + "/internal/pd/prefill",
         .headers = {{"Content-Type", "application/json"}},
         .body = json{{"prompt", {1, 400, 500, 600}},
                      {"export_from", 0},
                      {"agent", "name=" + agent + " host=elsewhere tcp=127.0.0.1:" + std::to_string(ghost.port)},
                      {"region", "agent=" + agent + " id=1 length=1048576 kind=host shm=-"},
                      {"offset", 0},
                      {"tag", 7},
                      {"model", model}}
                     .dump(),
         .timeout_ms = 30000});
  };
  std::vector<std::thread> ts;
  std::vector<int> status(3, 0);
  for (int i = 0; i < 3; ++i) {
    ts.emplace_back([&, i] {
      auto r = call(i);
      status[i] = r.ok() ? r->status : -1;
    });
  }
  std::this_thread::sleep_for(300ms);
  for (int i = 0; i < 5; ++i) {
    const auto t = Clock::now();
    auto h = http::fetch({.method = "GET", .url = prefill.url + "/health", .timeout_ms = 1000});
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    EXPECT_EQ(h->status, 200);
    EXPECT_LT(seconds_since(t), 0.5) << "the HTTP face froze behind the connects";
  }
  for (auto& t : ts) t.join();
  for (int s : status) EXPECT_EQ(s, 502) << "a peer that cannot be reached is a clean 502";
}

}  // namespace
}  // namespace tessera
