// Faults with real processes: a peer agent (`tessera link peer`) killed with SIGKILL in the middle of
// transfers must make every pending future fail promptly (within 2 s), never hang.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "base/process.h"
#include "link/agent.h"
#include "link/endpoint.h"
#include "support/paths.h"

namespace tessera::link {
namespace {

using Clock = std::chrono::steady_clock;

class PeerKillTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PeerKillTest, PendingFuturesFailWithinTwoSeconds) {
  const std::string endpoint = GetParam();
  constexpr uint64_t kRegion = 64 << 20;
  auto peer = tessera::Process::spawn(
      {.argv = {tessera::testing::tessera_bin(), "link", "peer", "--name", "victim", "--endpoint", endpoint,
                "--region-bytes", std::to_string(kRegion), "--seed", "0", "--streams", "2"},
       .pipe_stdin = true});
  ASSERT_TRUE(peer.ok()) << peer.status().to_string();
  auto info_line = peer->read_line(20000);
  ASSERT_TRUE(info_line.ok()) << info_line.status().to_string();
  auto region_line = peer->read_line(5000);
  ASSERT_TRUE(region_line.ok());
  auto info = AgentInfo::decode(info_line->substr(5));
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  RegionId remote{std::stoull(region_line->substr(7))};

  AgentOptions o;
  o.name = "survivor";
  o.endpoints = {endpoint};
  o.link.streams = 2;
  o.link.split_threshold = 256 << 10;
  o.link.max_inflight_bytes = 1 << 20;
  auto agent = std::move(Agent::create(o)).value();
  RegionId local = *agent->allocate_region(kRegion);
  ASSERT_TRUE(agent->connect(*info).ok());
  ASSERT_TRUE(agent->write("victim", {{local, 0, remote, 0, 4096}}).wait().ok());  // the link works

  // Far more than can finish before the kill: 64 x 64 MiB, alternating reads and tagged writes.
  std::vector<TransferFuture> pending;
  for (int i = 0; i < 64; ++i) {
    std::vector<Assignment> b = {{local, 0, remote, 0, kRegion}};
    pending.push_back(i % 2 ? agent->read("victim", b) : agent->write_with_imm("victim", b, i));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  peer->kill_now();
  auto killed_at = Clock::now();
  int failed = 0;
  for (auto& f : pending) {
    auto left = std::chrono::milliseconds(2000) -
                std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - killed_at);
    ASSERT_TRUE(f.wait_for(std::max(left, std::chrono::milliseconds(0))))
        << "a transfer was still pending 2 s after the peer died";
    if (!f.status().ok()) {
      ++failed;
      EXPECT_EQ(f.status().code(), StatusCode::kUnavailable) << f.status().to_string();
    }
  }
  EXPECT_GT(failed, 0);
  // New work towards the dead peer fails at once.
  TransferFuture after = agent->write("victim", {{local, 0, remote, 0, 16}});
  ASSERT_TRUE(after.wait_for(std::chrono::milliseconds(500)));
  EXPECT_EQ(after.status().code(), StatusCode::kUnavailable);
}

std::vector<std::string> endpoints() {
  register_builtin_endpoints();
  std::vector<std::string> names = endpoint_names();
  std::erase(names, "faulty");  // a wrapper over the others, tested in faulty_test.cc
  return names;                 // shm, tcp, and ucx where built
}

INSTANTIATE_TEST_SUITE_P(Endpoints, PeerKillTest, ::testing::ValuesIn(endpoints()));

}  // namespace
}  // namespace tessera::link
