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
// Thread-safety: one accept thread per loop; stop() may be called from any thread.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
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
  void run();
  void handle(int fd);

  int listen_fd_;
  AgentCore& core_;
  std::string endpoint_;
  LinkOptions options_;
  LocalPathFactory local_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  struct Pending {
    std::string peer;
    std::vector<int> fds;  // by lane; -1 until connected
    int have = 0;
  };
  std::map<uint64_t, Pending> pending_;  // owned by the accept thread
  std::set<std::string> refused_;        // owned by the accept thread: peer addresses already logged
};

// Connecting side: performs the handshake on each of the already-connected `fds` (lane i = fds[i]), checks
// that the acceptor is `peer`, and returns the started connection. Closes the fds on failure.
Result<std::shared_ptr<Connection>> finish_connect(AgentCore& core, const std::string& endpoint,
                                                   const std::string& peer, std::vector<int> fds,
                                                   const LinkOptions& options, std::unique_ptr<LocalDataPath> local);

}  // namespace tessera::link::internal
