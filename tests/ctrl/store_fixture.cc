#include "store_fixture.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "http/http.h"
#include "support/paths.h"

namespace tessera::ctrl::testing {

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

Result<std::unique_ptr<EtcdProcess>> EtcdProcess::start(const std::string& dir, int client_port) {
  const char* bin = "/usr/bin/etcd";
  if (access(bin, X_OK) != 0) {
    return not_found(
        "etcd is not installed at /usr/bin/etcd (apt package etcd-server; scripts/install-deps installs it)");
  }
  // free_port() closes the port it found, so another process of a parallel test run can bind it before etcd does
  // (etcd then exits at once: "bind: address already in use"). A fresh server (no port asked for) is then started
  // again on fresh ports with an empty data directory; one asked to come back on its port is not.
  Status failed;
  for (int attempt = 0; attempt < (client_port ? 1 : 5); ++attempt) {
    if (attempt > 0) {
      std::filesystem::remove_all(dir);
      std::filesystem::create_directories(dir);
      std::filesystem::permissions(dir, std::filesystem::perms::owner_all);
    }
    auto p = start_once(dir, client_port);
    if (p.ok()) return p;
    failed = p.status();
  }
  return failed;
}

Result<std::unique_ptr<EtcdProcess>> EtcdProcess::start_once(const std::string& dir, int client_port) {
  const char* bin = "/usr/bin/etcd";
  auto p = std::unique_ptr<EtcdProcess>(new EtcdProcess());
  p->client_port_ = client_port ? client_port : free_port();
  int peer_port = free_port();
  std::string client = fmt::format("http://127.0.0.1:{}", p->client_port_);
  std::string peer = fmt::format("http://127.0.0.1:{}", peer_port);
  auto child = tessera::Process::spawn({.argv = {bin,         "--name",
                                                 "t",         "--data-dir",
                                                 dir,         "--listen-client-urls",
                                                 client,      "--advertise-client-urls",
                                                 client,      "--listen-peer-urls",
                                                 peer,        "--initial-advertise-peer-urls",
                                                 peer,        "--initial-cluster",
                                                 "t=" + peer, "--heartbeat-interval",
                                                 "10",        "--election-timeout",
                                                 "100",       "--logger",
                                                 "zap",       "--log-level",
                                                 "error"},
                                        .pipe_stdin = true});
  TS_RETURN_IF_ERROR(child.status());
  p->child_.emplace(std::move(*child));
  for (int i = 0; i < 200; ++i) {
    http::ClientRequest req;
    req.method = "POST";
    req.url = client + "/v3/kv/range";
    req.body = R"({"key":"AA=="})";
    req.timeout_ms = 500;
    auto r = http::fetch(req);
    if (r.ok() && r->status == 200) return p;
    siginfo_t info{};  // exited (its ports taken): it will not answer; the destructor reaps it
    if (waitid(P_PID, static_cast<id_t>(p->child_->pid()), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        info.si_pid != 0) {
      return unavailable("etcd exited before answering");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return unavailable("etcd did not start answering within 10 s");
}

EtcdProcess::~EtcdProcess() {
  if (child_) child_->kill_now();
}

Status StoreUnderTest::start() {
  std::string dir = fmt::format("{}/etcd-{}", tessera::testing::scratch_dir(), generation_++);
  if (kind_ == "embedded") {
    embedded_ = std::make_unique<EmbeddedServer>();
    TS_RETURN_IF_ERROR(embedded_->start("127.0.0.1", static_cast<uint16_t>(port_)));
    port_ = embedded_->port();
  } else {
    std::filesystem::create_directories(dir);
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all);
    TS_ASSIGN_OR_RETURN(etcd_, EtcdProcess::start(dir, port_));
    port_ = etcd_->client_port();
  }
  url_ = fmt::format("http://127.0.0.1:{}", port_);
  return ok_status();
}

void StoreUnderTest::stop() {
  if (embedded_) embedded_->stop();
  embedded_.reset();
  etcd_.reset();
}

Status StoreUnderTest::restart_empty() {
  stop();
  Status s;
  for (int i = 0; i < 50; ++i) {  // the port may linger briefly
    s = start();
    if (s.ok()) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return s;
}

}  // namespace tessera::ctrl::testing
