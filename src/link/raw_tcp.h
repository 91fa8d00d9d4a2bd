// Plain TCP streams between two processes: the ceiling `tessera link bench --endpoint tcp` (and ucx over TCP)
// compares the link with. RawTcpSink is the receiving side (the `tessera link raw-sink` process), RawTcpStreams
// the sending side (inside the bench).
//
// Protocol, per connection and round: an 8-byte length (host order: both ends are on one host), that many
// bytes, then a one-byte acknowledgement once the sink has received them all. Connections stay open between
// rounds, like the link's own lanes, so both have their windows grown by the same traffic.
// Thread-safety: each object is used by one thread (RawTcpStreams::round runs its own threads inside).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/status.h"

namespace tessera::link {

class RawTcpStreams {
 public:
  RawTcpStreams() = default;
  ~RawTcpStreams();
  RawTcpStreams(const RawTcpStreams&) = delete;
  RawTcpStreams& operator=(const RawTcpStreams&) = delete;

  // Opens `streams` connections to 127.0.0.1:`port`.
  Status connect_to(int port, int streams);
  // One round: total/streams bytes per stream, in sends of `size` bytes from consecutive slots of the
  // `region` bytes at `src`; returns the rate (1e9 bytes per second) once the sink acknowledged every byte.
  Result<double> round(const std::byte* src, uint64_t region, uint64_t size, uint64_t total);

 private:
  std::vector<int> fds_;
};

class RawTcpSink {
 public:
  // Listens on 127.0.0.1 (any free port); each connection receives into its own slice of `buffer_bytes`
  // (at least 1 MiB each, `streams` slices).
  static Result<std::unique_ptr<RawTcpSink>> listen(uint64_t buffer_bytes, int streams);
  ~RawTcpSink();  // closes every connection and joins their threads
  RawTcpSink(const RawTcpSink&) = delete;
  RawTcpSink& operator=(const RawTcpSink&) = delete;

  int port() const { return port_; }
  // Accepts and serves connections (one thread each) until `stop_fd` is readable or closed (the command
  // passes stdin: it stops when its parent closes it).
  void serve_until(int stop_fd);

 private:
  RawTcpSink() = default;
  int listen_fd_ = -1;
  int port_ = 0;
  std::vector<std::vector<char>> buffers_;
  std::mutex mu_;                 // guards connections_ (closed from the destructor)
  std::vector<int> connections_;  // GUARDED_BY(mu_)
  std::vector<std::thread> threads_;
};

}  // namespace tessera::link
