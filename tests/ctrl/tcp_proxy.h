// TcpProxy: a loopback TCP forwarder for tests that need to see or break the traffic between a client and
// one server: it counts the HTTP requests whose first line starts with a given text (how many watch streams
// a client opened), and can go silent (forward nothing while keeping every connection open), which is what a
// network partition looks like to the client: no error, no answer.
//
// Thread-safety: every method may be called from any thread; one thread per connection direction.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tessera::ctrl::testing {

class TcpProxy {
 public:
  // Forwards 127.0.0.1:<port()> to 127.0.0.1:<upstream_port>; counts requests starting with `count_prefix`
  // (e.g. "POST /v3/watch ").
  TcpProxy(int upstream_port, std::string count_prefix);
  ~TcpProxy();
  int port() const { return port_; }
  int counted() const { return counted_.load(); }
  // Silent: bytes are read and dropped both ways; new connections are accepted and get nothing.
  void set_silent(bool silent) { silent_.store(silent); }
  // Closes every open connection (both sides), as a member's restart would.
  void drop_connections();

 private:
  void accept_loop();
  void pump(int from, int to, bool count);

  const int upstream_port_;
  const std::string prefix_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> silent_{false};
  std::atomic<int> counted_{0};
  std::mutex mu_;
  std::vector<int> fds_;              // GUARDED_BY(mu_)
  std::vector<std::thread> threads_;  // GUARDED_BY(mu_)
  std::thread acceptor_;
};

}  // namespace tessera::ctrl::testing
