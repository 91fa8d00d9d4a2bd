// The accepting side of the socket endpoints: accepts lanes on a listening socket, runs the HELLO handshake,
// groups lanes by connection id and hands each complete group to the agent as one FramedConnection.
// Also the connecting side's handshake. Endpoints only create sockets; everything after is shared here.
//
// The handshake proves the cluster token (LinkOptions::cluster_token) on every lane without sending it:
//   connector -> HELLO  name_c, nonce_c                  (16 random bytes, hex)
//   acceptor  -> HELLO  name_a, nonce_a, HMAC(token, "acceptor" transcript)
//   connector -> AUTH   HMAC(token, "connector" transcript)
//   acceptor  -> AUTH   (empty: accepted; the lane belongs to a connection from now on)
// The transcript binds both names, both nonces, the connection id and the lane, so a proof cannot be replayed
// on another connection or reflected back to its author. Each side checks the other's proof in constant
// time; a side holding a token refuses a peer without one, and a side without a token (open mode) sends
// empty proofs. No frame of the link protocol is read before the handshake succeeded; a failure closes the
// socket and is logged once per peer address.
//
// Each accepted socket's handshake runs on a thread of its own, so a peer that connects and then sends nothing
// (or one byte a second) delays only itself, never the next peer's accept: at most kMaxHandshakes are in
// flight, kMaxHandshakesPerAddress from one address, and each ends within the handshake timeout. Beyond those
// bounds a new socket is closed at once.
//
// Thread-safety: one accept thread per loop plus its handshake threads; pending_ and the handshake list are
// guarded by mu_; stop() may be called from any thread and wakes and joins them all.
#pragma once

#include <atomic>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "link/internal/agent_core.h"
#include "link/internal/framed_connection.h"

namespace tessera::link::internal {

using LocalPathFactory = std::function<std::unique_ptr<LocalDataPath>()>;

class AcceptLoop {
 public:
  // Takes ownership of `listen_fd` (bound and listening).
  AcceptLoop(int listen_fd, AgentCore& core, std::string endpoint, LinkOptions options, LocalPathFactory local);
  ~AcceptLoop();
  void start();
  void stop();

 private:
  struct Handshake;

  void run();
  void reap_finished();
  void handshake(Handshake* self);
  // Files a lane whose handshake succeeded under its connection; adopts the connection on its last lane.
  void join_lane(int fd, const FrameHeader& h, const std::string& peer);

  int listen_fd_;
  AgentCore& core_;
  std::string endpoint_;
  LinkOptions options_;
  LocalPathFactory local_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  struct Handshake {
    int fd = -1;
    std::string address;
    bool active = true;  // guarded by mu_: false once the thread has given the fd up (closed or filed)
    std::atomic<bool> done{false};
    std::thread thread;
  };
  std::mutex mu_;
  std::list<Handshake> handshakes_;  // guarded by mu_ (elements stay put; the accept thread reaps them)
  struct Pending {
    std::string peer;
    std::vector<int> fds;  // by lane; -1 until connected
    int have = 0;
    uint64_t since = 0;  // arrival order, to drop the oldest when too many are unfinished
  };
  std::map<uint64_t, Pending> pending_;  // guarded by mu_
  uint64_t next_pending_ = 0;            // guarded by mu_
  std::set<std::string> refused_;        // guarded by mu_: peer addresses already logged
};

// Connecting side: performs the handshake on each of the already-connected `fds` (lane i = fds[i]), checks
// that the acceptor is `peer`, and returns the started connection. Closes the fds on failure.
Result<std::shared_ptr<Connection>> finish_connect(AgentCore& core, const std::string& endpoint,
                                                   const std::string& peer, std::vector<int> fds,
                                                   const LinkOptions& options, std::unique_ptr<LocalDataPath> local);

}  // namespace tessera::link::internal
