// EtcdCluster (etcd_cluster.h).
#include "etcd_cluster.h"

#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "http/http.h"
#include "store_fixture.h"

namespace tessera::ctrl::testing {

Result<std::unique_ptr<EtcdCluster>> EtcdCluster::start(const std::string& dir, int members) {
  if (access("/usr/bin/etcd", X_OK) != 0) {
    return not_found("etcd is not installed at /usr/bin/etcd (apt package etcd-server; scripts/install-deps)");
  }
  // free_port() closes the port it found, so another process of a parallel test run can bind it before etcd does
  // (a member then exits at once: "bind: address already in use"). Such a start is torn down and tried again on
  // fresh ports, with fresh data directories.
  Status failed;
  for (int attempt = 0; attempt < 5; ++attempt) {
    auto c = std::unique_ptr<EtcdCluster>(new EtcdCluster());
    std::filesystem::remove_all(dir);
    for (int i = 0; i < members; ++i) {
      Member m;
      m.name = fmt::format("m{}", i);
      m.dir = fmt::format("{}/{}", dir, m.name);
      m.client_port = free_port();
      m.peer_port = free_port();
      std::filesystem::create_directories(m.dir);
      std::filesystem::permissions(m.dir, std::filesystem::perms::owner_all);
      c->initial_cluster_ += fmt::format("{}{}=http://127.0.0.1:{}", i ? "," : "", m.name, m.peer_port);
      c->members_.push_back(std::move(m));
    }
    failed = ok_status();
    for (int i = 0; i < members && failed.ok(); ++i) failed = c->spawn(i, "new");
    for (int i = 0; i < members && failed.ok(); ++i) failed = c->wait_ready(i);
    if (failed.ok()) return c;
  }  // c's destructor kills the members of a failed start
  return failed;
}

EtcdCluster::~EtcdCluster() {
  for (int i = 0; i < size(); ++i) kill(i);
}

std::string EtcdCluster::url(int i) const { return fmt::format("http://127.0.0.1:{}", members_[i].client_port); }

std::string EtcdCluster::urls() const {
  std::string out;
  for (int i = 0; i < size(); ++i) out += (i ? "," : "") + url(i);
  return out;
}

void EtcdCluster::kill(int i) {
  if (members_[i].child) members_[i].child->kill_now();
  members_[i].child.reset();
}

Status EtcdCluster::restart(int i) {
  kill(i);
  Status s;
  for (int attempt = 0; attempt < 50; ++attempt) {  // the ports may linger briefly
    s = spawn(i, "existing");
    if (s.ok()) s = wait_ready(i);
    if (s.ok()) return s;
    kill(i);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return s;
}

Status EtcdCluster::spawn(int i, const std::string& state) {
  Member& m = members_[i];
  const std::string client = url(i);
  const std::string peer = fmt::format("http://127.0.0.1:{}", m.peer_port);
  auto child = tessera::Process::spawn({.argv = {"/usr/bin/etcd",
                                                 "--name",
                                                 m.name,
                                                 "--data-dir",
                                                 m.dir,
                                                 "--listen-client-urls",
                                                 client,
                                                 "--advertise-client-urls",
                                                 client,
                                                 "--listen-peer-urls",
                                                 peer,
                                                 "--initial-advertise-peer-urls",
                                                 peer,
                                                 "--initial-cluster",
                                                 initial_cluster_,
                                                 "--initial-cluster-state",
                                                 state,
                                                 "--heartbeat-interval",
                                                 "50",
                                                 "--election-timeout",
                                                 "500",
                                                 "--logger",
                                                 "zap",
                                                 "--log-level",
                                                 "error"},
                                        .pipe_stdin = true});
  TS_RETURN_IF_ERROR(child.status());
  m.child.emplace(std::move(*child));
  return ok_status();
}

Status EtcdCluster::wait_ready(int i) {
  // Bounded by the clock, not by a count of tries: each try may itself wait its full second on a starved host.
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < end) {
    http::ClientRequest req;
    req.method = "POST";
    req.url = url(i) + "/v3/kv/range";
    req.body = R"({"key":"AA=="})";  // linearizable: answers only once the member has a leader
    req.timeout_ms = 1000;
    auto r = http::fetch(req);
    if (r.ok() && r->status == 200) return ok_status();
    // A member that exited (its ports taken) will not answer: say so now (without reaping it; kill() does).
    siginfo_t info{};
    if (members_[i].child &&
        waitid(P_PID, static_cast<id_t>(members_[i].child->pid()), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        info.si_pid != 0) {
      return unavailable(fmt::format("etcd member {} exited before answering", members_[i].name));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return unavailable(fmt::format("etcd member {} did not start answering within 20 s", members_[i].name));
}

}  // namespace tessera::ctrl::testing
