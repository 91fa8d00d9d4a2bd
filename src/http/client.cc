// The synchronous HTTP client: each call runs its own io_context with C++20 coroutines, so the whole
// exchange (resolve, connect, write, read) honours one deadline.
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <charconv>

#include <fmt/core.h>

#include "http/http.h"

namespace tessera::http {
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

asio::awaitable<beast::error_code> exchange(const ClientRequest& req, const Url& url, Response& out,
                                            const HeadersCallback* on_headers, const ChunkCallback* on_chunk) {
  auto ex = co_await asio::this_coro::executor;
  beast::error_code ec;
  auto redirect = asio::redirect_error(asio::use_awaitable, ec);
  tcp::resolver resolver(ex);
  beast::tcp_stream stream(ex);
  stream.expires_after(std::chrono::milliseconds(req.timeout_ms));
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
  bhttp::request<bhttp::string_body> r{bhttp::string_to_verb(req.method), url.target, 11};
  r.set(bhttp::field::host, fmt::format("{}:{}", url.host, url.port));
  r.set(bhttp::field::user_agent, "tessera");
  for (const auto& [k, v] : req.headers) r.set(k, v);
  if (!req.body.empty() || req.method == "POST" || req.method == "PUT") {
    r.body() = req.body;
    r.prepare_payload();
  }
  co_await bhttp::async_write(stream, r, redirect);
  if (ec) co_return ec;
  beast::flat_buffer buffer;
  if (on_chunk == nullptr) {
    bhttp::response_parser<bhttp::string_body> parser;
    parser.body_limit(1ull << 32);
    co_await bhttp::async_read(stream, buffer, parser, redirect);
    if (ec) co_return ec;
    auto& msg = parser.get();
    out.status = static_cast<int>(msg.result_int());
    for (const auto& f : msg) out.headers[std::string(f.name_string())] = std::string(f.value());
    out.body = std::move(msg.body());
  } else {
    bhttp::response_parser<bhttp::buffer_body> parser;
    parser.body_limit(boost::none);
    co_await bhttp::async_read_header(stream, buffer, parser, redirect);
    if (ec) co_return ec;
    out.status = static_cast<int>(parser.get().result_int());
    for (const auto& f : parser.get()) out.headers[std::string(f.name_string())] = std::string(f.value());
    if (on_headers != nullptr && !(*on_headers)(out)) {
      beast::error_code ignored;
      stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
      co_return beast::error_code{};
    }
    char chunk[16384];
    while (!parser.is_done()) {
      parser.get().body().data = chunk;
      parser.get().body().size = sizeof chunk;
      co_await bhttp::async_read_some(stream, buffer, parser, redirect);
      if (ec == bhttp::error::need_buffer) ec = {};
      if (ec) co_return ec;
      size_t n = sizeof chunk - parser.get().body().size;
      if (n > 0 && !(*on_chunk)(std::string_view(chunk, n))) break;
    }
  }
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  co_return beast::error_code{};
}

Result<Response> run(const ClientRequest& req, const HeadersCallback* on_headers, const ChunkCallback* on_chunk) {
  TS_ASSIGN_OR_RETURN(Url url, parse_url(req.url));
  asio::io_context ioc;
  Response out;
  beast::error_code result;
  bool done = false;
  asio::co_spawn(ioc, exchange(req, url, out, on_headers, on_chunk), [&](std::exception_ptr e, beast::error_code ec) {
    done = true;
    result = e ? beast::error_code(asio::error::fault) : ec;
  });
  ioc.run();
  if (!done) return internal_error("HTTP exchange did not complete");
  if (result) return from_error(result, url);
  return out;
}

}  // namespace

Result<Url> parse_url(std::string_view url) {
  constexpr std::string_view kScheme = "http://";
  if (url.substr(0, kScheme.size()) != kScheme) {
    return invalid_argument(fmt::format("unsupported URL '{}': expected http://host:port/path", url));
  }
  url.remove_prefix(kScheme.size());
  Url out;
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
