// The asynchronous HTTP/1.1 server. One Session per connection, all of its socket work on its own strand;
// a Writer is the handler's handle to the session, and every call on it is posted to that strand. With TLS a
// session runs an OpenSSL stream over its TCP stream (handshake first, under the header timeout); every read
// and write then goes through it, and nothing else changes.
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <list>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/core.h>

#include "base/log.h"
#include "base/mapped_file.h"
#include "http/http.h"

namespace tessera::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
constexpr int kAcceptBackoffMs = 50;

struct Route {
  std::string method;
  std::string path;
  bool prefix;
  Handler handler;
};

std::string status_line(int status) {
  std::string_view reason = bhttp::obsolete_reason(static_cast<bhttp::status>(status));
  return fmt::format("HTTP/1.1 {} {}\r\n", status, reason.empty() ? "Unknown" : reason);
}

std::string error_json(std::string_view message, std::string_view type) {
  std::string escaped;
  for (char c : message) {
    if (c == '"' || c == '\\') escaped += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    escaped += c;
  }
  return fmt::format(R"({{"error":{{"message":"{}","type":"{}","param":null,"code":null}}}})", escaped, type);
}

std::string url_decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
               std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

bool CaseInsensitiveLess::operator()(std::string_view a, std::string_view b) const {
  return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) < std::tolower(static_cast<unsigned char>(y));
  });
}

std::string Request::header(std::string_view name) const {
  auto it = headers.find(std::string(name));
  return it == headers.end() ? std::string() : it->second;
}

class Session;

struct Server::Impl {
  ServerOptions options;
  asio::io_context ioc;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  tcp::acceptor acceptor{ioc};
  // Accept errors (EMFILE, ENFILE, ENOBUFS...) leave the connection in the backlog, so an immediate retry fails
  // the same way: the loop waits kAcceptBackoffMs and logs at most once a second, with a count.
  asio::steady_timer accept_backoff{ioc};
  std::chrono::steady_clock::time_point accept_error_logged{};
  uint64_t accept_errors_unlogged = 0;
  std::vector<std::thread> threads;
  std::vector<Route> routes;
  std::atomic<int> connections{0};
  std::atomic<int> in_flight{0};
  std::atomic<bool> stopping{false};
  std::mutex sessions_mu;
  std::list<std::weak_ptr<Session>> sessions;  // GUARDED_BY(sessions_mu)
  uint16_t port = 0;
  std::optional<asio::ssl::context> tls;  // set in start() when the options name a certificate

  explicit Impl(ServerOptions o) : options(std::move(o)) {}
  void accept();
  const Route* find(const std::string& method, const std::string& path, bool* path_known) const;
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, Server::Impl& server) : stream_(std::move(socket)), server_(server) {
    server_.connections++;
    beast::error_code ec;
    auto ep = stream_.socket().remote_endpoint(ec);
    if (!ec) remote_ = fmt::format("{}:{}", ep.address().to_string(), ep.port());
    if (server_.tls) tls_.emplace(stream_, *server_.tls);
  }
  ~Session() { server_.connections--; }

  void start() {
    asio::dispatch(stream_.get_executor(), [self = shared_from_this()] {
      if (!self->tls_) return self->read_request();
      self->stream_.expires_after(std::chrono::milliseconds(self->server_.options.header_timeout_ms));
      self->tls_->async_handshake(asio::ssl::stream_base::server, [self](beast::error_code ec) {
        if (ec) return self->shutdown();  // not TLS, a bad certificate on the client's side, or too slow
        self->read_request();
      });
    });
  }

  // ---- called (via post) by Writer, always on the strand ----
  void queue(std::string data, bool last) {
    if (gone_) {
      if (last) finish_response();
      return;
    }
    out_.push_back(std::move(data));
    if (last) last_queued_ = true;
    if (!writing_) write_next();
  }
  void set_disconnect_callback(std::function<void()> cb) {
    if (gone_) {
      if (cb) cb();
      return;
    }
    on_disconnect_ = std::move(cb);
  }
  bool gone() const { return gone_flag_.load(); }
  bool keep_alive() const { return keep_alive_; }
  // The connection's strand (the socket was accepted onto one): all of its state is touched only there.
  asio::any_io_executor& strand() { return strand_; }
  void close_now() {
    asio::post(strand_, [self = shared_from_this()] {
      beast::error_code ec;
      self->stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
      self->stream_.socket().close(ec);
    });
  }

 private:
  void read_request() {
    if (server_.stopping) return shutdown();
    parser_.emplace();
    parser_->body_limit(server_.options.max_body_bytes);
    parser_->header_limit(64 * 1024);
    stream_.expires_after(
        std::chrono::milliseconds(first_ ? server_.options.header_timeout_ms : server_.options.idle_timeout_ms));
    first_ = false;
    auto done = [self = shared_from_this()](beast::error_code ec, size_t) { self->on_request(ec); };
    if (tls_) {
      bhttp::async_read(*tls_, buffer_, *parser_, std::move(done));
    } else {
      bhttp::async_read(stream_, buffer_, *parser_, std::move(done));
    }
  }

  void on_request(beast::error_code ec) {
    if (ec == bhttp::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
        ec == asio::error::operation_aborted || ec == beast::error::timeout) {
      return shutdown();
    }
    if (ec) {
      // Malformed request or one too large: answer and close (the stream position is no longer reliable).
      int status = ec == bhttp::error::body_limit ? 413 : (ec == bhttp::error::header_limit ? 431 : 400);
      std::string body =
          error_json(status == 413 ? "request body too large" : "malformed HTTP request: " + ec.message(),
                     "invalid_request_error");
      keep_alive_ = false;
      response_open_ = true;
      server_.in_flight++;
      queue(status_line(status) +
                fmt::format("Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                            body.size()) +
                body,
            true);
      return;
    }
    stream_.expires_never();
    auto& msg = parser_->get();
    Request req;
    req.method = std::string(msg.method_string());
    req.target = std::string(msg.target());
    size_t q = req.target.find('?');
    req.path = url_decode(req.target.substr(0, q));
    if (q != std::string::npos) {
      std::string_view qs = std::string_view(req.target).substr(q + 1);
      while (!qs.empty()) {
        size_t amp = qs.find('&');
        std::string_view kv = qs.substr(0, amp);
        size_t eq = kv.find('=');
        req.query[url_decode(kv.substr(0, eq))] = eq == std::string_view::npos ? "" : url_decode(kv.substr(eq + 1));
        if (amp == std::string_view::npos) break;
        qs.remove_prefix(amp + 1);
      }
    }
    for (const auto& f : msg) req.headers[std::string(f.name_string())] = std::string(f.value());
    req.body = std::move(msg.body());
    req.remote = remote_;
    keep_alive_ = msg.keep_alive() && !server_.stopping;
    parser_.reset();
    response_open_ = true;
    last_queued_ = false;
    server_.in_flight++;
    watch_for_disconnect();
    dispatch(std::move(req));
  }

  void dispatch(Request req);

  // While a handler works, a pending read tells us at once if the client hangs up.
  void watch_for_disconnect() {
    watching_ = true;
    read_some(buffer_.prepare(4096),
              asio::bind_executor(strand_, [self = shared_from_this()](beast::error_code ec, size_t n) {
                self->watching_ = false;
                if (!ec) {
                  self->buffer_.commit(n);  // a pipelined request: keep it for the next read
                  if (self->response_open_) return self->watch_for_disconnect();
                  return self->read_request();
                }
                if (ec == asio::error::operation_aborted && !self->response_open_) {
                  return self->read_request();  // cancelled on purpose: the response is done
                }
                if (ec != asio::error::operation_aborted) self->mark_gone();
              }));
  }

  void mark_gone() {
    if (gone_) return;
    gone_ = true;
    gone_flag_ = true;
    out_.clear();
    if (on_disconnect_) {
      auto cb = std::move(on_disconnect_);
      on_disconnect_ = nullptr;
      cb();
    }
    if (response_open_ && last_queued_) finish_response();
  }

  void write_next() {
    if (out_.empty()) {
      writing_ = false;
      if (last_queued_) finish_response();
      return;
    }
    writing_ = true;
    current_ = std::move(out_.front());
    out_.pop_front();
    write_some(asio::buffer(current_),
               asio::bind_executor(strand_, [self = shared_from_this()](beast::error_code ec, size_t) {
                 if (ec) {
                   self->writing_ = false;
                   self->mark_gone();
                   if (self->last_queued_) self->finish_response();
                   return;
                 }
                 self->write_next();
               }));
  }

  void finish_response() {
    if (!response_open_) return;
    response_open_ = false;
    server_.in_flight--;
    if (gone_ || !keep_alive_ || server_.stopping) return shutdown();
    if (watching_) {
      beast::error_code ec;
      stream_.socket().cancel(ec);  // the watch completes with operation_aborted and resumes reading
      return;
    }
    read_request();
  }

  // Reads some bytes / writes a whole buffer, through TLS when the session has it.
  template <class Buffers, class Callback>
  void read_some(const Buffers& b, Callback cb) {
    if (tls_) {
      tls_->async_read_some(b, std::move(cb));
    } else {
      stream_.socket().async_read_some(b, std::move(cb));
    }
  }
  template <class Buffers, class Callback>
  void write_some(const Buffers& b, Callback cb) {
    if (tls_) {
      asio::async_write(*tls_, b, std::move(cb));
    } else {
      asio::async_write(stream_.socket(), b, std::move(cb));
    }
  }

  void shutdown() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.socket().close(ec);
  }

  beast::tcp_stream stream_;
  std::optional<beast::ssl_stream<beast::tcp_stream&>> tls_;  // over stream_, when the server has TLS
  asio::any_io_executor strand_{stream_.get_executor()};
  Server::Impl& server_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  std::string remote_;
  std::deque<std::string> out_;
  std::string current_;
  std::function<void()> on_disconnect_;
  bool first_ = true;
  bool writing_ = false;
  bool watching_ = false;
  bool keep_alive_ = true;
  bool response_open_ = false;
  bool last_queued_ = false;
  bool gone_ = false;
  std::atomic<bool> gone_flag_{false};
};

namespace {

class Writer final : public ResponseWriter {
 public:
  // `always`: headers every answer on this writer carries (CORS).
  Writer(std::shared_ptr<Session> s, Headers always) : session_(std::move(s)), always_(std::move(always)) {}
  ~Writer() override {
    if (!started_.exchange(true)) {
      std::string body = error_json("the server did not produce a response", "server_error");
      post(status_line(500) + headers("application/json", {}, body.size(), false) + body, true);
    }
  }

  void send(int status, std::string body, std::string content_type, Headers extra) override {
    if (started_.exchange(true)) return;
    post(status_line(status) + headers(content_type, extra, body.size(), false) + body, true);
  }
  void start_stream(int status, std::string content_type, Headers extra) override {
    if (started_.exchange(true)) return;
    streaming_ = true;
    extra.emplace("Cache-Control", "no-cache");
    post(status_line(status) + headers(content_type, extra, 0, true), false);
  }
  bool write(std::string data) override {
    if (!streaming_ || ended_ || session_->gone()) return !session_->gone();
    if (data.empty()) return true;  // a zero-length chunk would end the stream
    post(fmt::format("{:x}\r\n", data.size()) + data + "\r\n", false);
    return true;
  }
  void end() override {
    if (!streaming_ || ended_.exchange(true)) return;
    post("0\r\n\r\n", true);
  }
  bool client_gone() const override { return session_->gone(); }
  void on_disconnect(std::function<void()> cb) override {
    asio::post(session_->strand(),
               [s = session_, cb = std::move(cb)]() mutable { s->set_disconnect_callback(std::move(cb)); });
  }

 private:
  std::string headers(const std::string& content_type, const Headers& extra, size_t length, bool chunked) const {
    std::string h = "Content-Type: " + content_type + "\r\n";
    h += chunked ? std::string("Transfer-Encoding: chunked\r\n") : fmt::format("Content-Length: {}\r\n", length);
    h += session_->keep_alive() ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
    for (const auto& [k, v] : extra) h += k + ": " + v + "\r\n";
    for (const auto& [k, v] : always_)
      if (extra.find(k) == extra.end()) h += k + ": " + v + "\r\n";
    return h + "\r\n";
  }
  void post(std::string data, bool last) {
    asio::post(session_->strand(),
               [s = session_, d = std::move(data), last]() mutable { s->queue(std::move(d), last); });
  }

  std::shared_ptr<Session> session_;
  const Headers always_;
  std::atomic<bool> started_{false};
  std::atomic<bool> streaming_{false};
  std::atomic<bool> ended_{false};
};

}  // namespace

void Session::dispatch(Request req) {
  // CORS (ServerOptions::allowed_origins): an allowed Origin is echoed on every answer, and a browser's preflight
  // (OPTIONS with Access-Control-Request-Method) is answered here for any served path.
  Headers cors;
  const std::string origin = req.header("origin");
  const auto& allowed = server_.options.allowed_origins;
  const bool any = std::find(allowed.begin(), allowed.end(), "*") != allowed.end();
  if (!origin.empty() && (any || std::find(allowed.begin(), allowed.end(), origin) != allowed.end())) {
    cors.emplace("Access-Control-Allow-Origin", any ? "*" : origin);
    if (!any) cors.emplace("Vary", "Origin");
    cors.emplace("Access-Control-Expose-Headers", "x-request-id");
  }
  std::shared_ptr<ResponseWriter> writer = std::make_shared<Writer>(shared_from_this(), cors);
  bool path_known = false;
  const Route* route = server_.find(req.method, req.path, &path_known);
  if (req.method == "OPTIONS" && path_known && !req.header("access-control-request-method").empty() &&
      (route == nullptr || route->method != "OPTIONS")) {
    if (cors.empty()) return writer->send(403, error_json("this origin is not allowed", "invalid_request_error"));
    const std::string asked = req.header("access-control-request-headers");
    writer->send(204, "", "text/plain",
                 {{"Access-Control-Allow-Methods", "GET, POST, OPTIONS"},
                  {"Access-Control-Allow-Headers",
                   asked.empty() ? std::string("Authorization, Content-Type, X-Request-Id") : asked},
                  {"Access-Control-Max-Age", "600"}});
    return;
  }
  if (route == nullptr) {
    int status = path_known ? 405 : 404;
    writer->send(status,
                 error_json(fmt::format("{} {} is not served here", req.method, req.path), "invalid_request_error"));
    return;
  }
  try {
    route->handler(req, writer);
  } catch (const std::exception& e) {
    log::error("handler for {} {} threw: {}", req.method, req.path, e.what());
    writer->send(500, error_json("internal error", "server_error"));
  }
}

const Route* Server::Impl::find(const std::string& method, const std::string& path, bool* path_known) const {
  const Route* best = nullptr;
  *path_known = false;
  for (const Route& r : routes) {
    bool match = r.prefix ? path.rfind(r.path, 0) == 0 : path == r.path;
    if (!match) continue;
    *path_known = true;
    if ((r.method == "*" || r.method == method) && (!best || r.path.size() > best->path.size())) best = &r;
  }
  return best;
}

void Server::Impl::accept() {
  acceptor.async_accept(asio::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
      ++accept_errors_unlogged;
      const auto now = std::chrono::steady_clock::now();
      if (now - accept_error_logged >= std::chrono::seconds(1)) {
        log::warn("accept failed ({} times since the last report): {}; retrying every {} ms", accept_errors_unlogged,
                  ec.message(), kAcceptBackoffMs);
        accept_error_logged = now;
        accept_errors_unlogged = 0;
      }
      accept_backoff.expires_after(std::chrono::milliseconds(kAcceptBackoffMs));
      accept_backoff.async_wait([this](beast::error_code wait_ec) {
        if (!wait_ec && acceptor.is_open()) accept();
      });
      return;
    } else if (!stopping) {
      beast::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      auto s = std::make_shared<Session>(std::move(socket), *this);
      {
        std::lock_guard<std::mutex> lock(sessions_mu);
        sessions.remove_if([](const std::weak_ptr<Session>& w) { return w.expired(); });
        sessions.push_back(s);
      }
      s->start();
    }
    accept();
  });
}

Server::Server(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

Server::~Server() { stop(0); }

void Server::route(std::string method, std::string path, Handler handler) {
  impl_->routes.push_back({std::move(method), std::move(path), false, std::move(handler)});
}

void Server::route_prefix(std::string method, std::string prefix, Handler handler) {
  impl_->routes.push_back({std::move(method), std::move(prefix), true, std::move(handler)});
}

Status Server::start() {
  beast::error_code ec;
  const ServerOptions& o = impl_->options;
  if (o.tls_cert_file.empty() != o.tls_key_file.empty()) {
    return invalid_argument("TLS needs both a certificate and a private key file");
  }
  if (!o.tls_cert_file.empty()) {
    impl_->tls.emplace(asio::ssl::context::tls_server);
    impl_->tls->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                                asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                                asio::ssl::context::no_tlsv1_1 | asio::ssl::context::single_dh_use,
                            ec);
    for (const std::string& f : {o.tls_cert_file, o.tls_key_file})
      TS_RETURN_IF_ERROR(check_regular_file(f).with_context("the TLS certificate or key"));
    impl_->tls->use_certificate_chain_file(o.tls_cert_file, ec);
    if (ec) {
      return invalid_argument(fmt::format("cannot load the TLS certificate '{}': {}", o.tls_cert_file, ec.message()));
    }
    impl_->tls->use_private_key_file(o.tls_key_file, asio::ssl::context::pem, ec);
    if (ec) {
      return invalid_argument(fmt::format("cannot load the TLS private key '{}': {}", o.tls_key_file, ec.message()));
    }
  }
  auto address = asio::ip::make_address(impl_->options.host, ec);
  if (ec) return invalid_argument(fmt::format("bad listen address '{}': {}", impl_->options.host, ec.message()));
  tcp::endpoint ep(address, impl_->options.port);
  impl_->acceptor.open(ep.protocol(), ec);
  if (!ec) impl_->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl_->acceptor.bind(ep, ec);
  if (!ec) impl_->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return unavailable(
        fmt::format("cannot listen on {}:{}: {}", impl_->options.host, impl_->options.port, ec.message()));
  }
  impl_->port = impl_->acceptor.local_endpoint().port();
  impl_->work.emplace(impl_->ioc.get_executor());
  impl_->accept();
  for (int i = 0; i < std::max(1, impl_->options.io_threads); ++i) {
    impl_->threads.emplace_back([this] { impl_->ioc.run(); });
  }
  return ok_status();
}

uint16_t Server::port() const { return impl_->port; }

int Server::open_connections() const { return impl_->connections.load(); }

void Server::stop(int grace_ms) {
  if (impl_->threads.empty()) return;
  impl_->stopping = true;
  asio::post(impl_->ioc, [this] {
    beast::error_code ec;
    impl_->acceptor.close(ec);
  });
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(grace_ms);
  while (impl_->in_flight.load() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  {
    std::lock_guard<std::mutex> lock(impl_->sessions_mu);
    for (auto& w : impl_->sessions) {
      if (auto s = w.lock()) s->close_now();
    }
  }
  impl_->work.reset();
  // Give the closes a moment to run, then stop whatever is left.
  auto close_deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  while (impl_->connections.load() > 0 && std::chrono::steady_clock::now() < close_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  impl_->ioc.stop();
  for (std::thread& t : impl_->threads) t.join();
  impl_->threads.clear();
  beast::error_code ec;
  impl_->acceptor.close(ec);  // in case the posted close never ran: no listener may outlive stop()
}

}  // namespace tessera::http
