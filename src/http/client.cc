// The synchronous HTTP client: each call runs its own io_context with C++20 coroutines, so the whole
// exchange (resolve, connect, write, read) honours one deadline. Pooled connections travel between calls
// as bare file descriptors (released from one io_context's socket, assigned to the next one's). https://
// runs the same exchange over an OpenSSL stream on top of the TCP one (verifying the server's certificate
// and name); such connections are not pooled.
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cerrno>
#include <charconv>
#include <map>
#include <mutex>
#include <optional>

#include <fmt/core.h>

#include "base/mapped_file.h"
#include "http/http.h"

namespace tessera::http {

struct ConnectionPool::Impl {
  struct Idle {
    int fd = -1;
    bool v6 = false;
    std::chrono::steady_clock::time_point since;
  };
  Impl(size_t max_idle, int idle_timeout_ms) : max_idle_per_host(max_idle), idle_timeout(idle_timeout_ms) {}
  ~Impl() {
    for (auto& [key, list] : idle) {
      for (const Idle& c : list) ::close(c.fd);
    }
  }

  // The newest idle connection that is still open (the peer has not closed it), or nullopt.
  std::optional<Idle> take(const std::string& key) {
    std::lock_guard lock(mu);
    auto it = idle.find(key);
    if (it == idle.end()) return std::nullopt;
    const auto now = std::chrono::steady_clock::now();
    while (!it->second.empty()) {
      Idle c = it->second.back();
      it->second.pop_back();
      char byte;
      // An open idle connection has nothing to read; EOF or stray bytes mean it cannot be reused.
      const ssize_t n = ::recv(c.fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      const bool open = n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
      if (open && now - c.since < idle_timeout) return c;
      ::close(c.fd);
    }
    return std::nullopt;
  }
  void give(const std::string& key, int fd, bool v6) {
    std::lock_guard lock(mu);
    auto& list = idle[key];
    if (list.size() >= max_idle_per_host) {
      ::close(fd);
      return;
    }
    list.push_back({fd, v6, std::chrono::steady_clock::now()});
  }
  void count_reuse() { reused++; }

  const size_t max_idle_per_host;
  const std::chrono::milliseconds idle_timeout;
  mutable std::mutex mu;
  std::map<std::string, std::vector<Idle>> idle;  // GUARDED_BY(mu); newest last
  std::atomic<uint64_t> reused{0};
};

ConnectionPool::ConnectionPool(size_t max_idle_per_host, int idle_timeout_ms)
    : impl_(std::make_unique<Impl>(max_idle_per_host, idle_timeout_ms)) {}
ConnectionPool::~ConnectionPool() = default;

size_t ConnectionPool::idle() const {
  std::lock_guard lock(impl_->mu);
  size_t n = 0;
  for (const auto& [key, list] : impl_->idle) n += list.size();
  return n;
}

uint64_t ConnectionPool::reused() const { return impl_->reused.load(); }

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

Status from_error(const beast::error_code& ec, const Url& url) {
  std::string where = fmt::format("{}:{}", url.host, url.port);
  if (ec == beast::error::timeout) return deadline_exceeded(fmt::format("request to {} timed out", where));
  return unavailable(fmt::format("request to {} failed: {}", where, ec.message()));
}

// One exchange's bookkeeping, across the retry of a stale pooled connection.
struct Attempt {
  bool fresh_only = false;  // do not take a pooled connection
  bool reused = false;      // this attempt ran on a pooled connection
  bool got_bytes = false;   // some of the response arrived
};

std::string pool_key(const Url& url) { return fmt::format("{}:{}", url.host, url.port); }

// One client TLS context per CA file, made on first use and kept for the process (contexts are thread-safe
// once configured, and loading a CA file per request would dominate a short exchange).
Result<asio::ssl::context*> client_tls_context(const std::string& ca_file) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<asio::ssl::context>> contexts;
  std::lock_guard lock(mu);
  auto& ctx = contexts[ca_file];
  if (ctx) return ctx.get();
  auto made = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_client);
  beast::error_code ec;
  made->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                        asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 | asio::ssl::context::no_tlsv1_1,
                    ec);
  made->set_verify_mode(asio::ssl::verify_peer, ec);
  if (ca_file.empty()) {
    made->set_default_verify_paths(ec);
  } else {
    if (Status st = check_regular_file(ca_file); !st.ok()) {
      contexts.erase(ca_file);
      return st.with_context("the TLS CA file");
    }
    made->load_verify_file(ca_file, ec);
  }
  if (ec) {
    contexts.erase(ca_file);
    return invalid_argument(fmt::format("cannot load the TLS CA file '{}': {}", ca_file, ec.message()));
  }
  ctx = std::move(made);
  return ctx.get();
}

// Gives the connection back to the pool when the response was complete and keep-alive; else closes it.
void finish_connection(beast::tcp_stream& stream, const ClientRequest& req, const Url& url, bool reusable) {
  beast::error_code ignored;
  if (req.pool != nullptr && reusable && stream.socket().is_open()) {
    const bool v6 = stream.socket().local_endpoint(ignored).protocol() == tcp::v6();
    if (!ignored) {
      const int fd = stream.socket().release(ignored);
      if (!ignored) {
        req.pool->impl().give(pool_key(url), fd, v6);
        return;
      }
    }
  }
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
}

// The request and its response over `io` (the TCP stream itself, or TLS on top of it).
template <class Stream>
asio::awaitable<beast::error_code> converse(Stream& io, beast::tcp_stream& tcp_layer, const ClientRequest& req,
                                            const Url& url, Response& out, const HeadersCallback* on_headers,
                                            const ChunkCallback* on_chunk, Attempt& at) {
  beast::error_code ec;
  auto redirect = asio::redirect_error(asio::use_awaitable, ec);
  bhttp::request<bhttp::string_body> r{bhttp::string_to_verb(req.method), url.target, 11};
  r.set(bhttp::field::host, fmt::format("{}:{}", url.host, url.port));
  r.set(bhttp::field::user_agent, "tessera");
  for (const auto& [k, v] : req.headers) r.set(k, v);
  if (!req.body.empty() || req.method == "POST" || req.method == "PUT") {
    r.body() = req.body;
    r.prepare_payload();
  }
  if (req.pool == nullptr) r.keep_alive(false);
  co_await bhttp::async_write(io, r, redirect);
  if (ec) co_return ec;
  beast::flat_buffer buffer;
  if (on_chunk == nullptr) {
    bhttp::response_parser<bhttp::string_body> parser;
    parser.body_limit(1ull << 32);
    co_await bhttp::async_read_header(io, buffer, parser, redirect);
    at.got_bytes = buffer.size() > 0 || parser.is_header_done();
    if (ec) co_return ec;
    co_await bhttp::async_read(io, buffer, parser, redirect);
    if (ec) co_return ec;
    auto& msg = parser.get();
    out.status = static_cast<int>(msg.result_int());
    for (const auto& f : msg) out.headers[std::string(f.name_string())] = std::string(f.value());
    const bool reusable = parser.is_done() && msg.keep_alive() && buffer.size() == 0;
    out.body = std::move(msg.body());
    finish_connection(tcp_layer, req, url, !url.tls && reusable);
    co_return beast::error_code{};
  }
  bhttp::response_parser<bhttp::buffer_body> parser;
  parser.body_limit(boost::none);
  co_await bhttp::async_read_header(io, buffer, parser, redirect);
  at.got_bytes = buffer.size() > 0 || parser.is_header_done();
  if (ec) co_return ec;
  out.status = static_cast<int>(parser.get().result_int());
  for (const auto& f : parser.get()) out.headers[std::string(f.name_string())] = std::string(f.value());
  if (on_headers != nullptr && !(*on_headers)(out)) {
    finish_connection(tcp_layer, req, url, false);
    co_return beast::error_code{};
  }
  char chunk[16384];
  bool stopped = false;
  while (!parser.is_done()) {
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof chunk;
    co_await bhttp::async_read_some(io, buffer, parser, redirect);
    if (ec == bhttp::error::need_buffer) ec = {};
    if (ec) co_return ec;
    size_t n = sizeof chunk - parser.get().body().size;
    if (n > 0 && !(*on_chunk)(std::string_view(chunk, n))) {
      stopped = true;
      break;
    }
  }
  finish_connection(tcp_layer, req, url,
                    !url.tls && !stopped && parser.is_done() && parser.get().keep_alive() && buffer.size() == 0);
  co_return beast::error_code{};
}

asio::awaitable<beast::error_code> exchange(const ClientRequest& req, const Url& url, Response& out,
                                            const HeadersCallback* on_headers, const ChunkCallback* on_chunk,
                                            Attempt& at) {
  auto ex = co_await asio::this_coro::executor;
  beast::error_code ec;
  auto redirect = asio::redirect_error(asio::use_awaitable, ec);
  tcp::resolver resolver(ex);
  beast::tcp_stream stream(ex);
  stream.expires_after(std::chrono::milliseconds(req.timeout_ms));
  if (req.pool != nullptr && !at.fresh_only && !url.tls) {
    if (auto idle = req.pool->impl().take(pool_key(url))) {
      stream.socket().assign(idle->v6 ? tcp::v6() : tcp::v4(), idle->fd, ec);
      if (ec) {
        ::close(idle->fd);
        ec = {};
      } else {
        at.reused = true;
      }
    }
  }
  if (!at.reused) {
    // A numeric address needs no resolver: Asio resolves on a helper thread it starts per io_context, which
    // would cost a thread creation per request (measurable behind the router).
    beast::error_code not_numeric;
    const asio::ip::address numeric = asio::ip::make_address(url.host, not_numeric);
    if (!not_numeric) {
      co_await stream.async_connect(tcp::endpoint(numeric, url.port), redirect);
    } else {
      auto results = co_await resolver.async_resolve(url.host, std::to_string(url.port), redirect);
      if (ec) co_return ec;
      co_await stream.async_connect(results, redirect);
    }
    if (ec) co_return ec;
    beast::error_code ignored;
    stream.socket().set_option(tcp::no_delay(true), ignored);
  }
  if (url.tls) {
    auto ctx = client_tls_context(req.tls_ca_file);
    if (!ctx.ok()) co_return beast::error_code(asio::error::invalid_argument);
    beast::ssl_stream<beast::tcp_stream&> tls(stream, **ctx);
    // The certificate must name the host: an IP address in its subjectAltName, or a DNS name (also sent as SNI).
    X509_VERIFY_PARAM* param = SSL_get0_param(tls.native_handle());
    beast::error_code not_ip;
    asio::ip::make_address(url.host, not_ip);
    if (!not_ip) {
      X509_VERIFY_PARAM_set1_ip_asc(param, url.host.c_str());
    } else {
      X509_VERIFY_PARAM_set1_host(param, url.host.c_str(), 0);
      SSL_set_tlsext_host_name(tls.native_handle(), url.host.c_str());
    }
    co_await tls.async_handshake(asio::ssl::stream_base::client, redirect);
    if (ec) co_return ec;
    co_return co_await converse(tls, stream, req, url, out, on_headers, on_chunk, at);
  }
  co_return co_await converse(stream, stream, req, url, out, on_headers, on_chunk, at);
}

Result<Response> run_once(const ClientRequest& req, const Url& url, const HeadersCallback* on_headers,
                          const ChunkCallback* on_chunk, Attempt& at) {
  asio::io_context ioc;
  Response out;
  beast::error_code result;
  bool done = false;
  bool cancelled = false;
  // Watches req.cancel; stopping the io_context abandons the exchange (its frame and socket are destroyed
  // with the io_context).
  asio::steady_timer watch(ioc);
  std::function<void(const beast::error_code&)> poll = [&](const beast::error_code& ec) {
    if (ec || done) return;
    if (req.cancel->load()) {
      cancelled = true;
      ioc.stop();
      return;
    }
    watch.expires_after(std::chrono::milliseconds(20));
    watch.async_wait(poll);
  };
  asio::co_spawn(ioc, exchange(req, url, out, on_headers, on_chunk, at),
                 [&](std::exception_ptr e, beast::error_code ec) {
                   done = true;
                   result = e ? beast::error_code(asio::error::fault) : ec;
                   watch.cancel();
                 });
  if (req.cancel != nullptr) {
    watch.expires_after(std::chrono::milliseconds(0));
    watch.async_wait(poll);
  }
  ioc.run();
  if (cancelled) return tessera::cancelled(fmt::format("request to {}:{} was cancelled", url.host, url.port));
  if (!done) return internal_error("HTTP exchange did not complete");
  if (result) return from_error(result, url);
  return out;
}

Result<Response> run(const ClientRequest& req, const HeadersCallback* on_headers, const ChunkCallback* on_chunk) {
  TS_ASSIGN_OR_RETURN(Url url, parse_url(req.url));
  if (url.tls) TS_RETURN_IF_ERROR(client_tls_context(req.tls_ca_file).status());
  Attempt at;
  auto r = run_once(req, url, on_headers, on_chunk, at);
  if (at.reused) req.pool->impl().count_reuse();
  // A pooled connection the server had closed while it sat idle fails before any response byte: the server
  // never saw the request, so it is sent again on a fresh connection.
  if (!r.ok() && at.reused && !at.got_bytes && r.status().code() == StatusCode::kUnavailable) {
    Attempt fresh;
    fresh.fresh_only = true;
    return run_once(req, url, on_headers, on_chunk, fresh);
  }
  return r;
}

}  // namespace

Result<Url> parse_url(std::string_view url) {
  constexpr std::string_view kScheme = "http://";
  constexpr std::string_view kTlsScheme = "https://";
  Url out;
  if (url.substr(0, kTlsScheme.size()) == kTlsScheme) {
    out.tls = true;
    out.port = 443;
    url.remove_prefix(kTlsScheme.size());
  } else if (url.substr(0, kScheme.size()) == kScheme) {
    url.remove_prefix(kScheme.size());
  } else {
    return invalid_argument(fmt::format("unsupported URL '{}': expected http(s)://host:port/path", url));
  }
  size_t slash = url.find('/');
  std::string_view authority = url.substr(0, slash);
  out.target = slash == std::string_view::npos ? "/" : std::string(url.substr(slash));
  size_t colon = authority.rfind(':');
  if (colon != std::string_view::npos && authority.find(']') == std::string_view::npos) {
    std::string_view port = authority.substr(colon + 1);
    unsigned value = 0;
    auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc() || p != port.data() + port.size() || value == 0 || value > 65535) {
      return invalid_argument(fmt::format("bad port in URL 'http://{}'", authority));
    }
    out.port = static_cast<uint16_t>(value);
    authority = authority.substr(0, colon);
  }
  if (authority.empty()) return invalid_argument("URL has no host");
  out.host = std::string(authority);
  return out;
}

Result<Response> fetch(const ClientRequest& request) { return run(request, nullptr, nullptr); }

Result<Response> fetch_streaming(const ClientRequest& request, const ChunkCallback& on_chunk) {
  return run(request, nullptr, &on_chunk);
}

Result<Response> fetch_streaming(const ClientRequest& request, const HeadersCallback& on_headers,
                                 const ChunkCallback& on_chunk) {
  return run(request, &on_headers, &on_chunk);
}

}  // namespace tessera::http
