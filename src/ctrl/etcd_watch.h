// EtcdWatch: one long-lived etcd watch stream per watcher (POST /v3/watch stays open; events arrive as they
// happen), resumed from the last revision seen on another member when the stream breaks.
//
// - The stream is opened once and kept: an idle watch costs no requests but its member's health probes.
// - A stream can break silently (a member cut off by a partition keeps the TCP connection open), so a second
//   thread probes the member every EtcdTimeouts::probe_interval_ms; a member that does not answer, or has had
//   no leader for three probes in a row (one election does not count), has its stream cancelled, and the watch
//   continues on the next member from revision+1: no event is lost or repeated.
// - History compacted past that revision: the callback hears OutOfRange (re-read with range()) and the stream
//   continues from the revision etcd reported as current.
// - Every member unreachable: the callback hears Unavailable once; the watch keeps retrying.
//
// Thread-safety: callbacks run on the stream thread; the destructor cancels the stream and joins both threads.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "ctrl/etcd_client.h"

namespace tessera::ctrl {

class EtcdWatch final : public Watch {
 public:
  // Events after `since` under `prefix`; `client` must outlive the watch.
  EtcdWatch(EtcdClient& client, std::string prefix, int64_t since, WatchCallback callback);
  ~EtcdWatch() override;

 private:
  void stream_loop();
  // One stream on member `i` until it ends; true when etcd accepted it (a "created" answer came).
  bool stream_once(size_t i, Status* why);
  void probe_loop();

  EtcdClient& client_;
  const std::string prefix_;
  WatchCallback callback_;
  int64_t since_;              // owned by the stream thread
  bool refresh_auth_ = false;  // owned by the stream thread: etcd refused the auth token
  std::atomic<bool> stop_{false};
  std::atomic<bool> cancel_{false};  // abandons the stream in flight
  std::mutex mu_;
  std::condition_variable cv_;
  bool streaming_ = false;   // GUARDED_BY(mu_): a stream on member_ is open
  size_t member_ = 0;        // GUARDED_BY(mu_)
  uint64_t stream_seq_ = 0;  // GUARDED_BY(mu_): which stream the probe is judging
  std::thread stream_thread_;
  std::thread probe_thread_;
};

}  // namespace tessera::ctrl
