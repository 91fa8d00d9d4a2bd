// http: the one HTTP/1.1 layer (server and client) shared by serve/, router/ and ctrl/.
//
// The server is asynchronous (Boost.Beast on a small io thread pool) and never blocks on a handler: a
// handler receives the request and a ResponseWriter, returns at once, and may answer later from any thread,
// either whole (send) or as a stream (start_stream / write / end, chunked transfer encoding, which is how
// server-sent events go out). The writer reports a client that went away, so long requests can be
// cancelled. The client is synchronous with a hard deadline and can deliver a streamed body piece by
// piece. Beast and Asio stay inside server.cc and client.cc: this header is cheap to include.
//
// Connections: without a pool each call opens its own connection and closes it. A ConnectionPool keeps
// connections open between calls (HTTP/1.1 keep-alive), per host:port: a call takes an idle one when there
// is one, and gives it back after reading a complete response the server did not mark "Connection: close".
// A reused connection that fails before the first response byte (the server closed it while it was idle)
// is retried once on a fresh connection; a response cut short, or abandoned by the caller, closes it.
//
// Thread-safety: Server::route() before start(); everything on ResponseWriter is thread-safe; fetch() may
// be called from several threads at once; a ConnectionPool is thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/cluster_token.h"
#include "base/status.h"

namespace tessera::http {

// Header names compare case-insensitively.
struct CaseInsensitiveLess {
  bool operator()(std::string_view a, std::string_view b) const;
};
using Headers = std::map<std::string, std::string, CaseInsensitiveLess>;

struct Request {
  std::string method;  // "GET", "POST", ...
  std::string target;  // path with query string
  std::string path;    // without the query string
  std::map<std::string, std::string> query;
  Headers headers;
  std::string body;
  std::string remote;  // peer address "ip:port"

  // The header's value, or "" when absent.
  std::string header(std::string_view name) const;
};

// How a handler answers. Exactly one of send() or start_stream() should be called; a writer destroyed
// without either answers 500 so that no client is left waiting.
class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;
  virtual void send(int status, std::string body, std::string content_type = "application/json",
                    Headers extra = {}) = 0;
  virtual void start_stream(int status, std::string content_type = "text/event-stream", Headers extra = {}) = 0;
  // Queues one piece of a stream. Returns false once the client is gone (the piece is dropped).
  virtual bool write(std::string data) = 0;
  virtual void end() = 0;
  // True once the connection failed or the peer closed it.
  virtual bool client_gone() const = 0;
  // Called once (on an io thread) when the client goes away before the response is complete.
  virtual void on_disconnect(std::function<void()> callback) = 0;
};

using Handler = std::function<void(const Request&, std::shared_ptr<ResponseWriter>)>;

struct ServerOptions {
  std::string host = "127.0.0.1";
  // TLS (both set): the server speaks HTTPS only, with this PEM certificate chain and private key.
  std::string tls_cert_file;
  std::string tls_key_file;
  uint16_t port = 0;  // 0: any free port (see Server::port())
  int io_threads = 2;
  // CORS: origins ("https://app.example" or "*") whose browsers may call this server; empty: no CORS headers, and
  // preflight requests are refused (403).
  std::vector<std::string> allowed_origins;
  size_t max_body_bytes = 8 << 20;  // larger bodies get 413
  int header_timeout_ms = 10000;    // a client must send its whole request within this time
  int idle_timeout_ms = 60000;      // keep-alive connections idle longer than this are closed
};

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();  // stops
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Exact-path route; "*" as method matches any. Unknown paths get 404, known paths with another method 405.
  void route(std::string method, std::string path, Handler handler);
  // A handler for every path under `prefix` (e.g. "/v1/nodes/").
  void route_prefix(std::string method, std::string prefix, Handler handler);

  // Binds and starts serving. Unavailable when the address cannot be bound.
  Status start();
  uint16_t port() const;
  // Stops accepting, waits up to `grace_ms` for in-flight responses to finish, then closes everything.
  void stop(int grace_ms = 5000);
  // Connections currently open (for tests and metrics).
  int open_connections() const;

  struct Impl;  // defined in server.cc (public only so that its connection sessions can name it)

 private:
  std::unique_ptr<Impl> impl_;
};

struct Response {
  int status = 0;
  Headers headers;
  std::string body;
};

class ConnectionPool {
 public:
  // At most `max_idle_per_host` idle connections kept per host:port; older than `idle_timeout_ms`: closed.
  explicit ConnectionPool(size_t max_idle_per_host = 64, int idle_timeout_ms = 30000);
  ~ConnectionPool();  // closes the idle connections
  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;

  size_t idle() const;
  uint64_t reused() const;  // calls served on a connection taken from the pool

  struct Impl;  // defined in client.cc
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

struct ClientRequest {
  std::string method = "GET";
  std::string url;  // http://host:port/path?query
  Headers headers;
  std::string body;
  int timeout_ms = 30000;  // whole exchange, connect included
  // Optional: once it reads true, the exchange is abandoned within ~20 ms and the call returns Cancelled
  // (the connection is closed). Lets a proxy give up on a node that stopped answering. Must outlive the call.
  const std::atomic<bool>* cancel = nullptr;
  // Optional: reuse keep-alive connections from this pool (must outlive the call). https:// connections are
  // never pooled (a TLS session cannot travel as a bare file descriptor).
  ConnectionPool* pool = nullptr;
  // https:// only: PEM file of the certificate authorities trusted for the server (empty: the system's).
  std::string tls_ca_file;
};

// Returns false to stop reading (the connection is then closed).
using ChunkCallback = std::function<bool(std::string_view)>;
// Receives the status and headers (body empty) before any of the body is read; returns false to stop
// there (the connection is then closed). Lets a proxy retry elsewhere before forwarding a single byte.
using HeadersCallback = std::function<bool(const Response&)>;

// One request (on a fresh connection, or a pooled one). Unavailable when the server cannot be reached, DeadlineExceeded
// past the timeout, InvalidArgument for a malformed URL. A non-2xx status is a Response, not an error.
Result<Response> fetch(const ClientRequest& request);
// Like fetch(), but the body is handed to `on_chunk` as it arrives (Response::body stays empty).
Result<Response> fetch_streaming(const ClientRequest& request, const ChunkCallback& on_chunk);
// Like fetch_streaming(), with `on_headers` called once the status line and headers are in.
Result<Response> fetch_streaming(const ClientRequest& request, const HeadersCallback& on_headers,
                                 const ChunkCallback& on_chunk);

struct Url {
  std::string host;
  uint16_t port = 80;  // 443 for https:// without a port
  std::string target = "/";
  bool tls = false;  // https://
};
Result<Url> parse_url(std::string_view url);

// ---- credentials (http/auth.cc; docs/security.md) -----------------------------------------------------------

// Wraps the handler of an internal route: it runs only for callers presenting `token` in the
// x-tessera-cluster-token header; others get 401 (no header) or 403 (a wrong one), compared in constant time.
// Each refusal is logged once per peer IP address, not once per request. An unconfigured token lets every
// caller through: the open single-user mode, which the process announces once at startup.
Handler require_cluster_token(const ClusterToken& token, Handler handler);
// True when `r` presents the configured token; false when none is configured.
bool presents_cluster_token(const Request& r, const ClusterToken& token);
// True when `r` may use internal fields (x-tessera-* headers, tessera_resume): it presents the token, or no
// token is configured (open mode).
bool internal_caller(const Request& r, const ClusterToken& token);
// Adds the x-tessera-cluster-token header when a token is configured.
void add_cluster_token(Headers& headers, const ClusterToken& token);
// The API key presented as "Authorization: Bearer KEY" (vLLM's and OpenAI's way), or "" when absent.
std::string bearer_token(const Request& r);
// True when `presented` equals one of `keys` (constant time per key).
bool api_key_matches(std::string_view presented, const std::vector<std::string>& keys);

}  // namespace tessera::http
