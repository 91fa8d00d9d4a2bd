// Running stores for tests: the embedded server in-process, or a real etcd server (/usr/bin/etcd) started
// on free ports with a fresh data directory. CI installs etcd-server; a missing binary is a failure.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>

#include "base/process.h"
#include "ctrl/embedded_server.h"
#include "ctrl/store.h"

namespace tessera::ctrl::testing {

int free_port();

class EtcdProcess {
 public:
  // Starts etcd on `client_port` (0: a free one) with data in `dir`; waits until it answers.
  static Result<std::unique_ptr<EtcdProcess>> start(const std::string& dir, int client_port = 0);
  ~EtcdProcess();
  std::string url() const { return fmt::format("http://127.0.0.1:{}", client_port_); }
  int client_port() const { return client_port_; }
  void kill_now() { child_->kill_now(); }

 private:
  static Result<std::unique_ptr<EtcdProcess>> start_once(const std::string& dir, int client_port);
  std::optional<tessera::Process> child_;
  int client_port_ = 0;
};

// One running store of either kind, restartable on the same address.
class StoreUnderTest {
 public:
  explicit StoreUnderTest(std::string kind) : kind_(std::move(kind)) {}
  Status start();
  // Stops the store and starts a fresh one (empty state) on the same port.
  Status restart_empty();
  void stop();
  std::string spec() const { return kind_ + "=" + url_; }
  std::unique_ptr<Store> client() const { return std::move(make_store(kind_, url_)).value(); }
  const std::string& kind() const { return kind_; }

 private:
  std::string kind_;
  std::string url_;
  int port_ = 0;
  int generation_ = 0;
  std::unique_ptr<EmbeddedServer> embedded_;
  std::unique_ptr<EtcdProcess> etcd_;
};

}  // namespace tessera::ctrl::testing
