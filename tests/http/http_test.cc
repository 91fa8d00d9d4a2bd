#include "http/http.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace tessera::http {
namespace {

using namespace std::chrono_literals;

// A raw TCP client, for what a well-behaved HTTP client never does.
class RawClient {
 public:
  explicit RawClient(uint16_t port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    timeval tv{5, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~RawClient() { close(); }
  bool connected() const { return connected_; }
  void send(std::string_view s) {
    ASSERT_EQ(::send(fd_, s.data(), s.size(), MSG_NOSIGNAL), static_cast<ssize_t>(s.size()));
  }
  // Reads until `needle` appears or the peer closes / times out.
  std::string read_until(std::string_view needle) {
    std::string out;
    char buf[4096];
    while (out.find(needle) == std::string::npos) {
      ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

class HttpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions o;
    o.max_body_bytes = 1024;
    server_ = std::make_unique<Server>(o);
    server_->route("GET", "/hello", [](const Request& req, std::shared_ptr<ResponseWriter> w) {
      w->send(200, req.query.count("name") ? "hello " + req.query.at("name") : std::string("hello"), "text/plain");
    });
    server_->route("POST", "/echo", [](const Request& req, std::shared_ptr<ResponseWriter> w) {
      w->send(200, req.body, "application/octet-stream", {{"X-Seen-Header", req.header("x-custom")}});
    });
    server_->route("GET", "/stream", [this](const Request&, std::shared_ptr<ResponseWriter> w) {
      w->on_disconnect([this] { disconnected_ = true; });
      w->start_stream(200);
      std::thread([this, w] {
        for (int i = 0; i < chunks_; ++i) {
          if (!w->write("data: " + std::to_string(i) + "\n\n")) break;
          std::this_thread::sleep_for(std::chrono::milliseconds(chunk_delay_ms_));
        }
        w->end();
      }).detach();
    });
    server_->route("GET", "/never", [this](const Request&, std::shared_ptr<ResponseWriter> w) { held_ = w; });
    server_->route("GET", "/forget", [](const Request&, std::shared_ptr<ResponseWriter>) {});
    server_->route_prefix("*", "/items/", [](const Request& req, std::shared_ptr<ResponseWriter> w) {
      w->send(200, req.method + " " + req.path.substr(7), "text/plain");
    });
    ASSERT_TRUE(server_->start().ok());
    base_ = "http://127.0.0.1:" + std::to_string(server_->port());
  }
  void TearDown() override {
    held_.reset();
    server_->stop(1000);
  }

  std::unique_ptr<Server> server_;
  std::string base_;
  std::shared_ptr<ResponseWriter> held_;
  std::atomic<bool> disconnected_{false};
  int chunks_ = 3;
  int chunk_delay_ms_ = 20;
};

TEST_F(HttpTest, RoutesMethodsAndQueries) {
  auto r = fetch({.method = "GET", .url = base_ + "/hello?name=ada%20l"});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "hello ada l");
  EXPECT_EQ(r->headers["content-type"], "text/plain");
  EXPECT_EQ(fetch({.method = "GET", .url = base_ + "/nothing"})->status, 404);
  auto wrong = fetch({.method = "POST", .url = base_ + "/hello", .body = "x"});
  EXPECT_EQ(wrong->status, 405);
  EXPECT_NE(wrong->body.find("\"error\""), std::string::npos);
  EXPECT_EQ(fetch({.method = "DELETE", .url = base_ + "/items/42"})->body, "DELETE 42");
}

TEST_F(HttpTest, EchoesBodiesAndHeaders) {
  std::string body(1000, 'z');
  auto r = fetch({.method = "POST", .url = base_ + "/echo", .headers = {{"X-Custom", "v1"}}, .body = body});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->body, body);
  EXPECT_EQ(r->headers["x-seen-header"], "v1");
}

TEST_F(HttpTest, OversizedBodyIs413) {
  auto r = fetch({.method = "POST", .url = base_ + "/echo", .body = std::string(5000, 'a')});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->status, 413);
}

TEST_F(HttpTest, MalformedRequestIs400AndServerKeepsServing) {
  RawClient c(server_->port());
  ASSERT_TRUE(c.connected());
  c.send("THIS IS NOT HTTP\r\n\r\n");
  std::string reply = c.read_until("\r\n\r\n");
  EXPECT_EQ(reply.rfind("HTTP/1.1 400", 0), 0u) << reply;
  EXPECT_EQ(fetch({.url = base_ + "/hello"})->status, 200);
}

TEST_F(HttpTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  RawClient c(server_->port());
  for (int i = 0; i < 3; ++i) {
    c.send("GET /hello?name=" + std::to_string(i) + " HTTP/1.1\r\nHost: x\r\n\r\n");
    std::string reply = c.read_until("hello " + std::to_string(i));
    EXPECT_NE(reply.find("hello " + std::to_string(i)), std::string::npos);
  }
  // Two pipelined requests in one write.
  c.send("GET /hello?name=p1 HTTP/1.1\r\nHost: x\r\n\r\nGET /hello?name=p2 HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string both = c.read_until("hello p2");
  EXPECT_NE(both.find("hello p1"), std::string::npos);
  EXPECT_NE(both.find("hello p2"), std::string::npos);
}

TEST_F(HttpTest, StreamsChunksAsTheyAreWritten) {
  std::vector<std::string> pieces;
  auto r = fetch_streaming({.url = base_ + "/stream"}, [&](std::string_view s) {
    pieces.emplace_back(s);
    return true;
  });
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->headers["content-type"], "text/event-stream");
  std::string all;
  for (auto& p : pieces) all += p;
  EXPECT_EQ(all, "data: 0\n\ndata: 1\n\ndata: 2\n\n");
  EXPECT_GE(pieces.size(), 2u) << "chunks should arrive separately, not buffered";
}

TEST_F(HttpTest, ClientDisconnectIsReportedToTheHandler) {
  chunks_ = 200;
  chunk_delay_ms_ = 10;
  {
    RawClient c(server_->port());
    c.send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
    c.read_until("data: 1");
  }  // closes mid-stream
  for (int i = 0; i < 300 && !disconnected_; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(disconnected_);
}

TEST_F(HttpTest, SlowClientDoesNotBlockOthers) {
  RawClient slow(server_->port());
  std::string req = "GET /hello?name=slow HTTP/1.1\r\nHost: x\r\n\r\n";
  std::thread t([&] {
    for (char ch : req) {
      slow.send(std::string_view(&ch, 1));
      std::this_thread::sleep_for(5ms);
    }
  });
  std::this_thread::sleep_for(30ms);
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(fetch({.url = base_ + "/hello"})->status, 200);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  t.join();
  EXPECT_NE(slow.read_until("hello slow").find("hello slow"), std::string::npos);
}

TEST_F(HttpTest, ForgottenResponseBecomes500) {
  auto r = fetch({.url = base_ + "/forget"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 500);
}

TEST_F(HttpTest, ClientTimesOutAndReportsUnreachableServers) {
  auto slow = fetch({.url = base_ + "/never", .timeout_ms = 200});
  ASSERT_FALSE(slow.ok());
  EXPECT_EQ(slow.status().code(), StatusCode::kDeadlineExceeded);
  Server closed({});
  ASSERT_TRUE(closed.start().ok());
  uint16_t port = closed.port();
  closed.stop(0);
  auto refused = fetch({.url = "http://127.0.0.1:" + std::to_string(port) + "/"});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
}

TEST_F(HttpTest, PooledClientReusesOneKeepAliveConnection) {
  ConnectionPool pool;
  for (int i = 0; i < 5; ++i) {
    ClientRequest r;
    r.url = base_ + "/hello?name=" + std::to_string(i);
    r.pool = &pool;
    auto res = fetch(r);
    ASSERT_TRUE(res.ok()) << res.status().to_string();
    EXPECT_EQ(res->body, "hello " + std::to_string(i));
  }
  // A streamed response read to its end also gives its connection back.
  ClientRequest s;
  s.url = base_ + "/stream";
  s.pool = &pool;
  std::string got;
  ASSERT_TRUE(fetch_streaming(s, [&](std::string_view p) {
                got += p;
                return true;
              }).ok());
  EXPECT_EQ(got, "data: 0\n\ndata: 1\n\ndata: 2\n\n");
  EXPECT_EQ(pool.reused(), 5u);
  EXPECT_EQ(pool.idle(), 1u);
  EXPECT_EQ(server_->open_connections(), 1);
}

TEST_F(HttpTest, AbandonedStreamIsNotReused) {
  ConnectionPool pool;
  chunks_ = 50;
  ClientRequest s;
  s.url = base_ + "/stream";
  s.pool = &pool;
  ASSERT_TRUE(fetch_streaming(s, [](std::string_view) { return false; }).ok());
  EXPECT_EQ(pool.idle(), 0u) << "a half-read response must not go back to the pool";
  ClientRequest r;
  r.url = base_ + "/hello";
  r.pool = &pool;
  auto res = fetch(r);
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->body, "hello");
}

TEST(HttpPool, ConnectionClosedByTheServerWhileIdleIsReplaced) {
  ServerOptions o;
  o.idle_timeout_ms = 100;
  Server server(o);
  server.route("GET", "/x", [](const Request&, std::shared_ptr<ResponseWriter> w) { w->send(200, "x", "text/plain"); });
  ASSERT_TRUE(server.start().ok());
  ConnectionPool pool;
  ClientRequest r;
  r.url = "http://127.0.0.1:" + std::to_string(server.port()) + "/x";
  r.pool = &pool;
  ASSERT_TRUE(fetch(r).ok());
  EXPECT_EQ(pool.idle(), 1u);
  std::this_thread::sleep_for(400ms);  // the server closes the idle connection
  auto res = fetch(r);
  ASSERT_TRUE(res.ok()) << res.status().to_string();
  EXPECT_EQ(res->body, "x");
  server.stop(1000);
}

TEST_F(HttpTest, PoolUnderConcurrencyKeepsFewConnections) {
  ConnectionPool pool;
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        ClientRequest r;
        r.method = "POST";
        r.url = base_ + "/echo";
        r.body = std::to_string(t) + "-" + std::to_string(i);
        r.pool = &pool;
        auto res = fetch(r);
        ok += res.ok() && res->body == r.body ? 1 : 0;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok, 120);
  EXPECT_LE(server_->open_connections(), 6);
  EXPECT_GE(pool.reused(), 100u);
}

TEST(Url, Parses) {
  auto u = parse_url("http://localhost:8080/v1/models?x=1");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "localhost");
  EXPECT_EQ(u->port, 8080);
  EXPECT_EQ(u->target, "/v1/models?x=1");
  EXPECT_EQ(parse_url("http://h")->target, "/");
  auto tls = parse_url("https://h/");
  ASSERT_TRUE(tls.ok());
  EXPECT_TRUE(tls->tls);
  EXPECT_EQ(tls->port, 443);
  EXPECT_FALSE(u->tls);
  EXPECT_FALSE(parse_url("ftp://h/").ok());
  EXPECT_FALSE(parse_url("http://h:99999/").ok());
  EXPECT_FALSE(parse_url("http://:80/").ok());
}

TEST(Server, BusyPortIsUnavailable) {
  Server a({});
  ASSERT_TRUE(a.start().ok());
  ServerOptions o;
  o.port = a.port();
  Server b(o);
  Status s = b.start();
  // SO_REUSEADDR does not allow two listeners on one port.
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.to_string();
}

}  // namespace
}  // namespace tessera::http
