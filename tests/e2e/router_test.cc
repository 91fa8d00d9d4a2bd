// `tessera route` in front of three real `tessera serve` nodes (stories260K): 300 requests while one node
// is SIGKILLed and restarted. Every request must complete, the dead node must leave rotation within 3 s,
// and it must come back (and serve again) after it restarts on the same port.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "http/http.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using testing::BackgroundProcess;
using testing::tessera_bin;
using Time = std::chrono::steady_clock;

std::unique_ptr<BackgroundProcess> start_node(int port, int* bound) {
  auto p = std::make_unique<BackgroundProcess>(std::vector<std::string>{
      tessera_bin(), "serve", "--model", testing::stories260k_dir(), "--port", std::to_string(port)});
  *bound = testing::port_from_line(p->wait_for_line("listening on"));
  return p;
}

// The router's view of one node, or null.
json node_view(const std::string& router, const std::string& node) {
  http::ClientRequest r;
  r.url = router + "/admin/nodes";
  r.timeout_ms = 2000;
  auto res = http::fetch(r);
  if (!res.ok() || res->status != 200) return nullptr;
  const json all = json::parse(res->body, nullptr, false);
  if (!all.is_object() || !all.contains("nodes")) return nullptr;
  for (const auto& n : all["nodes"]) {
    if (n["url"] == node) return n;
  }
  return nullptr;
}

TEST(RouterEndToEnd, NodeKilledMidRunLosesNoRequestAndComesBack) {
  TS_REQUIRE_STORIES260K();
  std::vector<std::unique_ptr<BackgroundProcess>> nodes;
  std::vector<int> ports;
  std::string list;
  for (int i = 0; i < 3; ++i) {
    int port = 0;
    nodes.push_back(start_node(0, &port));
    ASSERT_GT(port, 0);
    ports.push_back(port);
    list += (i ? "," : "") + ("http://127.0.0.1:" + std::to_string(port));
  }
  BackgroundProcess router({tessera_bin(), "route", "--port", "0", "--nodes", list, "--strategy", "round_robin"});
  const int router_port = testing::port_from_line(router.wait_for_line("listening on"));
  ASSERT_GT(router_port, 0);
  const std::string router_url = "http://127.0.0.1:" + std::to_string(router_port);
  const std::string victim = "http://127.0.0.1:" + std::to_string(ports[1]);

  constexpr int kRequests = 300;
  std::atomic<int> next{0}, done{0}, failed{0};
  // The second half of the run waits for the restarted node to be back (at most 20 s), so that there is
  // traffic left to show it serving again, however fast or slow this machine is.
  std::atomic<bool> second_half{false};
  const auto run_start = Time::now();
  std::mutex mu;
  std::vector<std::string> failures;
  auto client = [&] {
    for (int i = next++; i < kRequests; i = next++) {
      while (i >= kRequests / 2 && !second_half && Time::now() - run_start < 20s) std::this_thread::sleep_for(5ms);
      http::ClientRequest r;
      r.method = "POST";
      r.url = router_url + "/v1/completions";
      r.timeout_ms = 60000;
      r.headers["content-type"] = "application/json";
      r.body = json{
          {"model", "stories260K"},
          {"prompt", "Once upon a time " + std::to_string(i)},
          {"max_tokens", 24},
          {"temperature",
           0}}.dump();
      auto res = http::fetch(r);
      bool ok = res.ok() && res->status == 200;
      if (ok) {
        json j = json::parse(res->body, nullptr, false);
        ok = j.is_object() && j["choices"].size() == 1 && j["choices"][0]["text"].is_string() &&
             j["usage"]["completion_tokens"].get<int>() > 0;
      }
      if (!ok) {
        failed++;
        std::lock_guard lock(mu);
        failures.push_back(res.ok() ? std::to_string(res->status) + " " + res->body : res.status().to_string());
      }
      done++;
    }
  };
  std::vector<std::thread> clients;
  for (int t = 0; t < 6; ++t) clients.emplace_back(client);
  // A failed ASSERT below returns early: release and join the clients first.
  struct Joiner {
    std::vector<std::thread>& threads;
    std::atomic<bool>& release;
    ~Joiner() {
      release = true;
      for (auto& t : threads)
        if (t.joinable()) t.join();
    }
  } joiner{clients, second_half};

  while (done < 40) std::this_thread::sleep_for(5ms);
  ASSERT_TRUE(node_view(router_url, victim)["healthy"].get<bool>());
  const auto killed_at = Time::now();
  EXPECT_EQ(nodes[1]->stop(SIGKILL), 128 + SIGKILL);
  double out_after_s = -1;
  while (Time::now() - killed_at < 10s) {
    json v = node_view(router_url, victim);
    if (!v.is_null() && !v["in_rotation"].get<bool>()) {
      out_after_s = std::chrono::duration<double>(Time::now() - killed_at).count();
      break;
    }
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_GE(out_after_s, 0) << "the killed node never left rotation";
  EXPECT_LE(out_after_s, 3.0);
  std::printf("killed node out of rotation after %.2f s (at request %d)\n", out_after_s, done.load());

  int port = 0;
  nodes[1] = start_node(ports[1], &port);
  ASSERT_EQ(port, ports[1]);
  const auto restarted_at = Time::now();
  double back_after_s = -1;
  while (Time::now() - restarted_at < 10s) {
    json v = node_view(router_url, victim);
    if (!v.is_null() && v["in_rotation"].get<bool>()) {
      back_after_s = std::chrono::duration<double>(Time::now() - restarted_at).count();
      break;
    }
    std::this_thread::sleep_for(20ms);
  }
  const int done_when_back = done.load();
  const uint64_t served_before = node_view(router_url, victim)["requests_total"].get<uint64_t>();
  second_half = true;
  std::printf("restarted node back in rotation after %.2f s (at request %d)\n", back_after_s, done_when_back);
  EXPECT_GE(back_after_s, 0) << "the restarted node never came back";
  EXPECT_LT(done_when_back, kRequests) << "the run ended before the node came back: nothing left to prove";

  for (auto& t : clients) t.join();
  EXPECT_EQ(done, kRequests);
  EXPECT_EQ(failed, 0) << (failures.empty() ? "" : failures[0]);
  EXPECT_GT(node_view(router_url, victim)["requests_total"].get<uint64_t>(), served_before)
      << "the restarted node got no requests";

  // With no traffic at all, only the probes can notice: still out of rotation within 3 s.
  const std::string idle_victim = "http://127.0.0.1:" + std::to_string(ports[2]);
  const auto idle_killed_at = Time::now();
  EXPECT_EQ(nodes[2]->stop(SIGKILL), 128 + SIGKILL);
  double idle_out_after_s = -1;
  while (Time::now() - idle_killed_at < 10s) {
    json v = node_view(router_url, idle_victim);
    if (!v.is_null() && !v["in_rotation"].get<bool>()) {
      idle_out_after_s = std::chrono::duration<double>(Time::now() - idle_killed_at).count();
      break;
    }
    std::this_thread::sleep_for(20ms);
  }
  std::printf("idle killed node out of rotation after %.2f s\n", idle_out_after_s);
  EXPECT_GE(idle_out_after_s, 0);
  EXPECT_LE(idle_out_after_s, 3.0);
  EXPECT_EQ(router.stop(SIGTERM), 0);
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

TEST(RouterCli, BadFlagsFailWithAnActionableMessage) {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--nodes", "http://127.0.0.1:1", "--strategy", "fastest"},
       "unknown routing strategy 'fastest'; known: round_robin"},
      {{"--nodes", "ftp://x"}, "unsupported URL"},
      {{"--nodes", "http://127.0.0.1:1=abc"}, "bad capacity"},
      {{"--nodes", "http://a:1,http://a:1"}, "listed twice"},
      {{}, "no nodes given"},
      {{"--ctrl", "ftp://x"}, "must be KIND=URL"},
      {{"--ctrl", "zookeeper=http://127.0.0.1:1"}, "unknown ctrl store 'zookeeper'; known: embedded, etcd"},
      {{"--ctrl", "http://127.0.0.1:1", "--ctrl-embedded"}, "exclude each other"},
      {{"--nodes", "http://127.0.0.1:1", "--tokenizer", "/nonexistent/tok.bin"}, "tok.bin"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> argv = {testing::tessera_bin(), "route", "--port", "0"};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    auto r = testing::run_process(argv, 20);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
  }
}

}  // namespace
}  // namespace tessera
