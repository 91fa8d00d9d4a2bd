// The HTTP side of the credentials: the cluster-token guard of internal routes (401 without the header, 403
// with a wrong one, open when no token is configured), API-key parsing, and TLS between the server and the
// client (a certificate from a CA made in the test; the client refuses a server its CA did not sign).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "http/http.h"
#include "support/paths.h"
#include "support/test_ca.h"

namespace tessera::http {
namespace {

ClusterToken token(char c) { return std::move(ClusterToken::from_secret(std::string(40, c))).value(); }

Handler ok_handler() {
  return [](const Request&, std::shared_ptr<ResponseWriter> w) { w->send(200, "inside", "text/plain"); };
}

TEST(ClusterTokenGuard, RefusesMissingAndWrongTokensAndAdmitsTheRightOne) {
  Server server({});
  server.route("GET", "/internal", require_cluster_token(token('k'), ok_handler()));
  server.route("GET", "/open", require_cluster_token(ClusterToken(), ok_handler()));
  ASSERT_TRUE(server.start().ok());
  const std::string base = "http://127.0.0.1:" + std::to_string(server.port());
  auto none = fetch({.url = base + "/internal"});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->status, 401);
  EXPECT_EQ(none->body.find("inside"), std::string::npos);
  auto wrong =
      fetch({.url = base + "/internal", .headers = {{std::string(kClusterTokenHeader), std::string(40, 'j')}}});
  ASSERT_TRUE(wrong.ok());
  EXPECT_EQ(wrong->status, 403);
  auto empty = fetch({.url = base + "/internal", .headers = {{std::string(kClusterTokenHeader), ""}}});
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->status, 403);
  Headers h;
  add_cluster_token(h, token('k'));
  auto right = fetch({.url = base + "/internal", .headers = h});
  ASSERT_TRUE(right.ok());
  EXPECT_EQ(right->status, 200);
  EXPECT_EQ(right->body, "inside");
  // No token configured: the route is open (single-user development runs).
  auto open = fetch({.url = base + "/open"});
  ASSERT_TRUE(open.ok());
  EXPECT_EQ(open->status, 200);
}

TEST(ClusterTokenGuard, InternalCallerAndApiKeys) {
  Request r;
  EXPECT_TRUE(internal_caller(r, ClusterToken()));  // open mode
  EXPECT_FALSE(internal_caller(r, token('k')));
  r.headers[std::string(kClusterTokenHeader)] = std::string(40, 'k');
  EXPECT_TRUE(internal_caller(r, token('k')));
  EXPECT_FALSE(presents_cluster_token(r, ClusterToken()));
  r.headers["Authorization"] = "Bearer sk-one";
  EXPECT_EQ(bearer_token(r), "sk-one");
  EXPECT_TRUE(api_key_matches("sk-one", {"sk-zero", "sk-one"}));
  EXPECT_FALSE(api_key_matches("sk-on", {"sk-one"}));
  EXPECT_FALSE(api_key_matches("", {"sk-one"}));
  r.headers["Authorization"] = "Basic c2stb25l";
  EXPECT_EQ(bearer_token(r), "");
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::scratch_dir();
    if (!testing::make_test_ca(dir_)) GTEST_SKIP() << "the openssl CLI could not make a test CA";
    ServerOptions o;
    o.tls_cert_file = dir_ + "/server.pem";
    o.tls_key_file = dir_ + "/server.key";
    server_ = std::make_unique<Server>(o);
    server_->route("POST", "/echo", [](const Request& r, std::shared_ptr<ResponseWriter> w) {
      w->send(200, r.body, "text/plain", {{"X-Token-Seen", r.header(std::string(kClusterTokenHeader))}});
    });
    server_->route("GET", "/stream", [](const Request&, std::shared_ptr<ResponseWriter> w) {
      w->start_stream(200);
      std::thread([w] {
        for (int i = 0; i < 5; ++i) w->write("data: " + std::to_string(i) + "\n\n");
        w->end();
      }).detach();
    });
    ASSERT_TRUE(server_->start().ok());
    base_ = "https://127.0.0.1:" + std::to_string(server_->port());
  }
  std::string dir_, base_;
  std::unique_ptr<Server> server_;
};

TEST_F(TlsTest, ClientTrustingTheCaTalksToTheServer) {
  auto r = fetch({.method = "POST",
                  .url = base_ + "/echo",
                  .headers = {{std::string(kClusterTokenHeader), "secret"}},
                  .body = "over tls",
                  .tls_ca_file = dir_ + "/ca.pem"});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "over tls");
  EXPECT_EQ(r->headers["X-Token-Seen"], "secret");
  std::string streamed;
  auto s = fetch_streaming({.url = base_ + "/stream", .tls_ca_file = dir_ + "/ca.pem"}, [&](std::string_view c) {
    streamed.append(c);
    return true;
  });
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(streamed, "data: 0\n\ndata: 1\n\ndata: 2\n\ndata: 3\n\ndata: 4\n\n");
  // A pool does not break https (TLS connections are simply not kept).
  ConnectionPool pool;
  for (int i = 0; i < 3; ++i) {
    auto p =
        fetch({.method = "POST", .url = base_ + "/echo", .body = "x", .pool = &pool, .tls_ca_file = dir_ + "/ca.pem"});
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    EXPECT_EQ(p->body, "x");
  }
}

TEST_F(TlsTest, UntrustedServerPlainClientsAndBadFilesAreRefused) {
  // The system's CAs did not sign the test certificate.
  auto untrusted = fetch({.url = base_ + "/echo", .timeout_ms = 3000});
  EXPECT_FALSE(untrusted.ok());
  // Plain HTTP to the TLS port gets no answer, and the server keeps serving.
  auto plain = fetch({.url = "http://127.0.0.1:" + std::to_string(server_->port()) + "/echo", .timeout_ms = 3000});
  EXPECT_TRUE(!plain.ok() || plain->status != 200);
  auto again = fetch({.method = "POST", .url = base_ + "/echo", .body = "still", .tls_ca_file = dir_ + "/ca.pem"});
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(again->body, "still");
  auto no_ca = fetch({.url = base_ + "/echo", .tls_ca_file = dir_ + "/missing.pem"});
  EXPECT_EQ(no_ca.status().code(), StatusCode::kInvalidArgument);
  Server bad({.tls_cert_file = dir_ + "/missing.pem", .tls_key_file = dir_ + "/server.key"});
  EXPECT_EQ(bad.start().code(), StatusCode::kInvalidArgument);
  Server half({.tls_cert_file = dir_ + "/server.pem"});
  EXPECT_EQ(half.start().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera::http
