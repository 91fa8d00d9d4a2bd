// The router's thread count must not grow with the number of registered nodes (issue 20: 800 fake nodes
// registered through the control plane grew the router from 72 to 872 threads, one per health probe).
// Here 300 fake nodes join through an in-process control plane; each points at a socket that never answers
// (its backlog is full), so every probe blocks for the whole probe timeout, the worst case for a
// thread-per-probe design. The process's thread count must stay within a small constant of what it was.
#include <gtest/gtest.h>

#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "ctrl/embedded_server.h"
#include "ctrl/registry.h"
#include "router/ctrl_membership.h"
#include "router/gateway.h"

namespace tessera::router {
namespace {

int thread_count() {
  int n = 0;
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return -1;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n;
}

TEST(RouterThreads, DoNotGrowWithTheNumberOfRegisteredNodes) {
  // A listener that never accepts: connections to it (on any 127.x address) hang until the client gives up.
  int hole = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_ANY);
  ASSERT_EQ(::bind(hole, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  ASSERT_EQ(::listen(hole, 1), 0);
  socklen_t len = sizeof sa;
  getsockname(hole, reinterpret_cast<sockaddr*>(&sa), &len);
  const int port = ntohs(sa.sin_port);

  ctrl::EmbeddedServer ctrl_server;
  ASSERT_TRUE(ctrl_server.start("127.0.0.1", 0).ok());
  const std::string ctrl_url = fmt::format("http://127.0.0.1:{}", ctrl_server.port());

  GatewayOptions o;
  o.http.host = "127.0.0.1";
  o.http.port = 0;
  o.workers = 4;
  o.health.probe_interval_ms = 200;
  o.health.probe_timeout_ms = 500;
  auto gateway = Gateway::create(o);
  ASSERT_TRUE(gateway.ok());
  ASSERT_TRUE((*gateway)->start().ok());
  auto store = ctrl::make_store("embedded", ctrl_url);
  ASSERT_TRUE(store.ok());
  auto membership = make_ctrl_membership(std::move(*store), {});
  ASSERT_TRUE(membership->start(**gateway).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const int before = thread_count();

  // 300 nodes under one lease (one writer, so the test adds no threads of its own).
  auto writer = ctrl::make_store("embedded", ctrl_url);
  ASSERT_TRUE(writer.ok());
  auto lease = (*writer)->grant_lease(std::chrono::milliseconds(60000));
  ASSERT_TRUE(lease.ok());
  constexpr int kNodes = 300;
  for (int i = 0; i < kNodes; ++i) {
    ctrl::NodeInfo n;
    n.id = fmt::format("fake{}", i);
    n.role = "both";
    n.address = fmt::format("http://127.0.{}.{}:{}", 1 + i / 200, 1 + i % 200, port);
    ASSERT_TRUE((*writer)->put(ctrl::kNodesPrefix + n.id, n.to_json(), *lease).ok());
  }
  int most = before;
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(4)) {
    most = std::max(most, thread_count());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ((*gateway)->registry().list().size(), static_cast<size_t>(kNodes)) << "every fake node registered";
  // The probe pool is 8 threads; a thread per probe would add about one per node.
  EXPECT_LE(most - before, 16) << "threads before: " << before << ", at most: " << most;
  membership->stop();
  (*gateway)->stop();
  ctrl_server.stop();
  ::close(hole);
}

}  // namespace
}  // namespace tessera::router
