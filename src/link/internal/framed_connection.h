// FramedConnection: a Connection over S connected stream sockets ("lanes") speaking the wire.h protocol.
// tcp uses it as is; shm uses it over Unix sockets for control frames and plugs in a LocalDataPath that
// copies read/write chunks directly between mapped segments.
//
// Threads: per lane one writer (drains the lane's queue onto the socket) and one reader (serves the peer's
// requests and completes ours). Readers never block on a socket write (replies go through the writer
// queue), so two agents reading from each other cannot deadlock.
//
// Backpressure: at most LinkOptions::max_inflight_bytes of chunks are on the lanes at once (to a peer on this
// host over IP, at most same_host_inflight_bytes, and two chunks whatever their size); the rest wait in
// order. Cancelled operations' waiting chunks are dropped. A socket error or EOF fails every pending chunk
// with Unavailable at once (a killed peer's kernel closes its sockets, so this takes milliseconds).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "link/endpoint.h"
#include "link/internal/agent_core.h"
#include "link/internal/op_state.h"
#include "link/internal/wire.h"

namespace tessera::link::internal {

class FramedConnection;

// Executes read/write chunks without the wire when it can (shm). Called on a lane's writer thread.
class LocalDataPath {
 public:
  virtual ~LocalDataPath() = default;
  // The chunk's status when it was executed locally; nullopt to send it over the wire instead.
  virtual std::optional<Status> execute(FramedConnection& conn, OpKind kind, const Chunk& chunk) = 0;
  // Adds what a peer's data path needs to reach one of our regions (called when a peer describes it).
  virtual void describe(const std::shared_ptr<Region>& region, RegionDesc& desc) {}
};

class FramedConnection final : public Connection {
 public:
  // Takes ownership of the connected, handshaken sockets in `fds` (one per lane).
  FramedConnection(AgentCore& core, std::string endpoint, std::string peer, std::vector<int> fds, LinkOptions options,
                   std::unique_ptr<LocalDataPath> local = nullptr);
  ~FramedConnection() override;
  void start();

  const std::string& peer() const override { return peer_; }
  std::string_view endpoint() const override { return endpoint_; }
  void submit(std::shared_ptr<Operation> op, std::vector<Chunk> chunks) override;
  void drain_and_close(Status why, std::chrono::milliseconds timeout) override;
  void close(Status why) override;
  bool broken() const override;

  // Asks the peer to describe one of its regions (blocking, for the local data path).
  Result<RegionDesc> describe_remote(RegionId id, std::chrono::milliseconds timeout);

 private:
  struct OutItem {
    FrameHeader header;
    bool is_chunk = false;  // a chunk of ours (else a reply to the peer)
    uint64_t chunk_id = 0;
    std::shared_ptr<Region> source;  // read reply: payload comes from this region
    uint64_t source_offset = 0;
    std::vector<std::byte> bytes;  // small payloads (errors, descriptions, staged device data)
    bool flush_only = false;       // nothing to send but the lane's owed bytes
  };
  struct Lane {
    int fd = -1;
    std::thread reader;
    std::thread writer;
    std::mutex mu;
    std::condition_variable cv;
    std::deque<OutItem> queue;  // guarded by mu
    std::mutex write_mu;        // held while writing one frame to fd
    std::string owed;           // guarded by write_mu: the unsent rest of a reply the reader sent itself
  };
  struct DescribeWait {
    OpState state;
    std::string text;
  };

  void reader_loop(Lane& lane);
  // Sends a payload-free reply (an acknowledgement) from the reader thread when the lane is free and the
  // socket has room, else queues it for the lane's writer: saves a thread wake-up per acknowledged chunk.
  void reply(Lane& lane, FrameType type, uint64_t op_id);
  static Status flush_owed(Lane& lane);  // with write_mu held: first what a partial reply left unsent
  void writer_loop(Lane& lane);
  Status write_item(Lane& lane, OutItem& item);
  Status write_chunk(Lane& lane, uint64_t id);
  Status handle_frame(Lane& lane, const FrameHeader& h);
  void enqueue(Lane& lane, OutItem item);
  void reply_error(Lane& lane, uint64_t op_id, const Status& s);
  void pump();
  static bool small_one_sided(const Operation& op, const std::vector<Chunk>& chunks);
  void finish(uint64_t id, const Status& s);
  void complete_chunk(Chunk chunk, const Status& s);
  std::optional<Chunk> lookup(uint64_t id);

  AgentCore& core_;
  const std::string endpoint_;
  const std::string peer_;
  const LinkOptions options_;
  uint64_t inflight_limit_ = 0;  // bytes of chunks on the lanes; set in the constructor only
  std::unique_ptr<LocalDataPath> local_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  std::atomic<bool> stopping_{false};

  mutable std::mutex mu_;
  std::condition_variable drained_cv_;
  Status broken_;                                                // guarded by mu_; non-OK once closed
  std::deque<Chunk> waiting_;                                    // guarded by mu_
  std::map<uint64_t, Chunk> inflight_;                           // guarded by mu_
  uint64_t inflight_bytes_ = 0;                                  // guarded by mu_
  uint64_t next_id_ = 1;                                         // guarded by mu_
  size_t next_lane_ = 0;                                         // guarded by mu_
  std::map<uint64_t, std::shared_ptr<DescribeWait>> describes_;  // guarded by mu_
  bool draining_ = false;                                        // guarded by mu_: new chunks fail
  bool closed_ = false;                                          // guarded by mu_: close() finished failing everything
  int completing_ = 0;  // guarded by mu_: chunks taken out of inflight_, not yet completed
};

}  // namespace tessera::link::internal
