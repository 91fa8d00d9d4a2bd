// The gateway in-process against fake nodes (http::Server with scripted answers): validation before any
// node is reached, API keys, retries before the first byte, the SSE error event after it, request ids,
// client disconnects reaching the node, /v1/models aggregation and the admin API.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "http/http.h"
#include "router/gateway.h"

namespace tessera::router {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using WriterPtr = std::shared_ptr<http::ResponseWriter>;

constexpr const char* kSse =
    "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"choices\":[{\"text\":\"b\"}]}\n\ndata: [DONE]\n\n";

// A scripted node: /health answers 200, /v1/completions runs `handler`.
class FakeNode {
 public:
  // `pd_info`: the body of GET /internal/pd/info (a PD node); empty: no such route (a colocated node).
  explicit FakeNode(std::string model = "m", std::string pd_info = "") : server_(http::ServerOptions{}) {
    if (!pd_info.empty()) {
      server_.route("GET", "/internal/pd/info",
                    [pd_info](const http::Request&, WriterPtr w) { w->send(200, pd_info); });
    }
    server_.route("GET", "/health", [this, model](const http::Request&, WriterPtr w) {
      if (!healthy) return w->send(503, R"({"status":"draining"})");
      w->send(200, json{{"status", "ok"}, {"kv_blocks_total", 64}, {"models", {model}}}.dump());
    });
    server_.route("GET", "/v1/models", [model](const http::Request&, WriterPtr w) {
      json m = json::object();
      m["id"] = model;
      m["object"] = "model";
      json body = json::object();
      body["object"] = "list";
      body["data"] = json::array({m});
      w->send(200, body.dump());
    });
    auto gen = [this](const http::Request& r, WriterPtr w) {
      {
        std::lock_guard lock(mu);
        last_prefill = r.header("x-tessera-prefill-node");
      }
      hits++;
      last_request_id = r.header("x-request-id");
      {
        std::lock_guard lock(mu);
        last_body = r.body;
      }
      handler(r, std::move(w));
    };
    server_.route("POST", "/v1/completions", gen);
    server_.route("POST", "/v1/chat/completions", gen);
    for (const char* path : {"/tokenize", "/detokenize"}) {
      server_.route("POST", path, [this, path](const http::Request& r, WriterPtr w) {
        hits++;
        w->send(200, json{{"path", path}, {"body", r.body}}.dump());
      });
    }
    EXPECT_TRUE(server_.start().ok());
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(server_.port()); }

  std::atomic<int> hits{0};
  std::atomic<bool> healthy{true};
  std::string last_request_id;
  std::mutex mu;
  std::string last_prefill;  // GUARDED_BY(mu): the x-tessera-prefill-node header of the last request
  std::string last_body;     // GUARDED_BY(mu)
  std::string prefill_header() {
    std::lock_guard lock(mu);
    return last_prefill;
  }
  std::function<void(const http::Request&, WriterPtr)> handler = [](const http::Request& r, WriterPtr w) {
    if (json::parse(r.body).value("stream", false)) {
      w->start_stream(200);
      w->write(kSse);
      w->end();
    } else {
      w->send(200, R"({"choices":[{"text":"ab"}],"usage":{"completion_tokens":2}})");
    }
  };

 private:
  http::Server server_;
};

// A port nothing listens on.
std::string dead_url() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
}

class GatewayTest : public ::testing::Test {
 protected:
  void start(std::vector<std::string> nodes, GatewayOptions o = {}) {
    o.backoff_ms = 1;
    auto g = Gateway::create(std::move(o));
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    gateway_ = std::move(*g);
    for (const auto& n : nodes) gateway_->on_node_added({n, 0});
    ASSERT_TRUE(gateway_->start().ok());
  }
  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(gateway_->port()) + path;
  }
  http::Response post(const std::string& path, const std::string& body, http::Headers headers = {}) {
    http::ClientRequest r;
    r.method = "POST";
    r.url = url(path);
    r.body = body;
    r.headers = std::move(headers);
    r.headers["content-type"] = "application/json";
    auto res = http::fetch(r);
    EXPECT_TRUE(res.ok()) << res.status().to_string();
    return res.ok() ? *res : http::Response{};
  }
  http::Response get(const std::string& path, http::Headers headers = {}) {
    http::ClientRequest r;
    r.url = url(path);
    r.headers = std::move(headers);
    auto res = http::fetch(r);
    EXPECT_TRUE(res.ok()) << res.status().to_string();
    return res.ok() ? *res : http::Response{};
  }
  std::unique_ptr<Gateway> gateway_;
};

void expect_openai_error(const http::Response& r, int status, const std::string& param = "") {
  EXPECT_EQ(r.status, status) << r.body;
  json j = json::parse(r.body, nullptr, false);
  ASSERT_TRUE(j.is_object() && j.contains("error")) << r.body;
  EXPECT_TRUE(j["error"]["message"].is_string());
  EXPECT_TRUE(j["error"]["type"].is_string());
  if (!param.empty()) {
    EXPECT_EQ(j["error"]["param"], json(param)) << r.body;
  }
}

TEST_F(GatewayTest, MalformedRequestsNeverReachANode) {
  FakeNode node;
  start({node.url()});
  expect_openai_error(post("/v1/completions", "{not json"), 400);
  expect_openai_error(post("/v1/completions", R"({"model":"m"})"), 400, "prompt");
  expect_openai_error(post("/v1/completions", R"({"model":"m","prompt":"x","max_tokens":"ten"})"), 400, "max_tokens");
  expect_openai_error(post("/v1/completions", R"({"model":"m","prompt":"x","temperature":-1})"), 400, "temperature");
  expect_openai_error(post("/v1/completions", R"({"model":"m","prompt":"x","n":17})"), 400, "n");
  expect_openai_error(post("/v1/completions", R"({"model":"m","prompt":"x","logit_bias":{"a":1}})"), 400, "logit_bias");
  expect_openai_error(post("/v1/chat/completions", R"({"model":"m"})"), 400, "messages");
  expect_openai_error(post("/v1/chat/completions", R"({"model":"m","messages":[{"role":"wizard","content":"x"}]})"),
                      400, "messages");
  expect_openai_error(post("/v1/chat/completions", R"({"model":"m","messages":[{"role":"user","content":5}]})"), 400,
                      "messages");
  expect_openai_error(post("/v1/completions", R"([1,2,3])"), 400);
  EXPECT_EQ(node.hits, 0);
  // And a good one does.
  EXPECT_EQ(post("/v1/completions", R"({"model":"m","prompt":"x"})").status, 200);
  EXPECT_EQ(node.hits, 1);
}

// Issue 29: the fields of the sampling API reach the node as the client wrote them, and so do vLLM's tokenizer
// routes (answered by a node, which has the tokenizer).
TEST_F(GatewayTest, SamplingFieldsAndTokenizerRoutesAreForwardedUnchanged) {
  FakeNode node;
  start({node.url()});
  const std::string body =
      R"({"model":"m","prompt":["a",[1,2]],"n":3,"seed":0,"logit_bias":{"7":-100},"repetition_penalty":1.2,)"
      R"("min_tokens":2,"prompt_logprobs":1,"echo":true,"logprobs":1})";
  EXPECT_EQ(post("/v1/completions", body).status, 200);
  const std::string chat =
      R"({"model":"m","messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"enable_thinking":false},)"
      R"("reasoning_effort":"low","n":2})";
  EXPECT_EQ(post("/v1/chat/completions", chat).status, 200);
  {
    std::lock_guard lock(node.mu);
    EXPECT_EQ(node.last_body, chat);
  }
  for (const char* path : {"/tokenize", "/detokenize"}) {
    const std::string tok = R"({"model":"m","prompt":"hi","add_special_tokens":false})";
    http::Response r = post(path, tok);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(json::parse(r.body), (json{{"path", path}, {"body", tok}}));
  }
  EXPECT_EQ(node.hits, 4);
}

TEST_F(GatewayTest, ApiKeysAreChecked) {
  FakeNode node;
  GatewayOptions o;
  o.api_keys = {"k1", "k2"};
  start({node.url()}, o);
  const std::string body = R"({"model":"m","prompt":"x"})";
  auto none = post("/v1/completions", body);
  expect_openai_error(none, 401);
  EXPECT_EQ(json::parse(none.body)["error"]["code"], "invalid_api_key");
  expect_openai_error(post("/v1/completions", body, {{"authorization", "Bearer nope"}}), 401);
  expect_openai_error(get("/admin/nodes"), 401);
  EXPECT_EQ(node.hits, 0);
  EXPECT_EQ(post("/v1/completions", body, {{"authorization", "Bearer k2"}}).status, 200);
  EXPECT_EQ(get("/health").status, 200);  // probes and scrapers need no key
}

TEST_F(GatewayTest, RetriesBeforeTheFirstByteOnConnectErrors5xxAnd429) {
  FakeNode busy, broken, good;
  busy.handler = [](const http::Request&, WriterPtr w) { w->send(429, R"({"error":{"message":"full"}})"); };
  broken.handler = [](const http::Request&, WriterPtr w) { w->send(500, R"({"error":{"message":"boom"}})"); };
  GatewayOptions o;
  o.max_attempts = 4;
  start({busy.url(), broken.url(), good.url(), dead_url()}, o);
  for (int i = 0; i < 8; ++i) {
    const bool stream = i % 2 == 0;
    auto r = post("/v1/completions", json{{"model", "m"}, {"prompt", "x"}, {"stream", stream}}.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.body, stream ? std::string(kSse) : R"({"choices":[{"text":"ab"}],"usage":{"completion_tokens":2}})");
  }
  EXPECT_EQ(good.hits, 8);
  EXPECT_GT(busy.hits, 0);
  // The failing nodes were ejected by passive outlier detection (3 consecutive connect errors or 5xx);
  // the busy one (429) stays in rotation.
  json nodes = json::parse(get("/admin/nodes").body)["nodes"];
  for (const auto& n : nodes) {
    if (n["url"] == busy.url()) {
      EXPECT_TRUE(n["healthy"].get<bool>());
    }
  }
}

TEST_F(GatewayTest, GivesUpAfterMaxAttemptsWithAnOpenAIError) {
  FakeNode a, b;
  a.handler = b.handler = [](const http::Request&, WriterPtr w) { w->send(503, R"({"error":{"message":"x"}})"); };
  GatewayOptions o;
  o.max_attempts = 2;
  start({a.url(), b.url()}, o);
  auto r = post("/v1/completions", R"({"model":"m","prompt":"x"})");
  // The last attempt's answer is forwarded as it is.
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(a.hits + b.hits, 2);
}

// A node that sends headers and one event, then drops the connection.
class BreakingNode {
 public:
  BreakingNode() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    listen(fd_, 8);
    socklen_t len = sizeof addr;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] {
      for (;;) {
        int c = accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        char buf[8192];
        const ssize_t n = recv(c, buf, sizeof buf, 0);
        if (n > 3 && std::string_view(buf, 3) == "GET") {  // a health probe: fine
          const std::string ok = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}";
          send(c, ok.data(), ok.size(), MSG_NOSIGNAL);
          close(c);
          continue;
        }
        const std::string head =
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
        const std::string event = "data: {\"choices\":[{\"text\":\"a\"}]}\n\n";
        char size[16];
        snprintf(size, sizeof size, "%zx\r\n", event.size());
        const std::string out = head + size + event + "\r\n";
        send(c, out.data(), out.size(), MSG_NOSIGNAL);
        std::this_thread::sleep_for(50ms);
        close(c);
      }
    });
  }
  ~BreakingNode() {
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
};

TEST_F(GatewayTest, FailureAfterBytesStreamedEndsWithAnSseErrorEvent) {
  BreakingNode node;
  start({node.url()});
  auto r = post("/v1/completions", R"({"model":"m","prompt":"x","stream":true})");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body.find("data: {\"choices\":[{\"text\":\"a\"}]}\n\n"), 0u) << r.body;
  const size_t err = r.body.find("data: {\"error\"");
  ASSERT_NE(err, std::string::npos) << r.body;
  EXPECT_NE(r.body.find("data: [DONE]\n\n", err), std::string::npos);
}

TEST_F(GatewayTest, RequestIdsArePropagated) {
  FakeNode node;
  start({node.url()});
  auto r = post("/v1/completions", R"({"model":"m","prompt":"x"})", {{"x-request-id", "abc-123"}});
  EXPECT_EQ(node.last_request_id, "abc-123");
  EXPECT_EQ(r.headers["x-request-id"], "abc-123");
  auto s = post("/v1/completions", R"({"model":"m","prompt":"x","stream":true})");
  EXPECT_FALSE(node.last_request_id.empty());
  EXPECT_EQ(s.headers["x-request-id"], node.last_request_id);
}

TEST_F(GatewayTest, ClientDisconnectAbortsTheUpstreamRequest) {
  FakeNode node;
  std::atomic<bool> node_saw_disconnect{false};
  node.handler = [&](const http::Request&, WriterPtr w) {
    w->on_disconnect([&] { node_saw_disconnect = true; });
    w->start_stream(200);
    std::thread([w] {
      for (int i = 0; i < 2000 && w->write("data: {\"choices\":[]}\n\n"); ++i) std::this_thread::sleep_for(5ms);
      w->end();
    }).detach();
  };
  start({node.url()});
  http::ClientRequest r;
  r.method = "POST";
  r.url = url("/v1/completions");
  r.body = R"({"model":"m","prompt":"x","stream":true})";
  int pieces = 0;
  auto res = http::fetch_streaming(r, [&](std::string_view) { return ++pieces < 3; });
  ASSERT_TRUE(res.ok());
  for (int i = 0; i < 200 && !node_saw_disconnect; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(node_saw_disconnect);
}

TEST_F(GatewayTest, ModelsAreTheUnionOfTheNodes) {
  FakeNode a("alpha"), b("beta"), c("alpha");
  start({a.url(), b.url(), c.url()});
  auto r = get("/v1/models");
  ASSERT_EQ(r.status, 200) << r.body;
  const json body = json::parse(r.body);
  std::set<std::string> ids;
  for (const auto& m : body["data"]) ids.insert(m["id"].get<std::string>());
  EXPECT_EQ(ids, (std::set<std::string>{"alpha", "beta"}));
  EXPECT_EQ(body["data"].size(), 2u);
}

TEST_F(GatewayTest, AdminApiAddsDrainsAndRemovesNodes) {
  FakeNode a, b;
  start({a.url()});
  auto added = post("/admin/nodes", json{{"url", b.url() + "/"}, {"capacity", 3}}.dump());
  EXPECT_EQ(added.status, 201) << added.body;
  EXPECT_EQ(post("/admin/nodes", json{{"url", b.url()}}.dump()).status, 409);
  expect_openai_error(post("/admin/nodes", R"({"url":"ftp://x"})"), 400);
  expect_openai_error(post("/admin/nodes", R"({"nope":1})"), 400);
  json list = json::parse(get("/admin/nodes").body)["nodes"];
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(post("/admin/nodes/drain", json{{"url", a.url()}}.dump()).status, 200);
  for (int i = 0; i < 4; ++i) post("/v1/completions", R"({"model":"m","prompt":"x"})");
  EXPECT_EQ(a.hits, 0);
  EXPECT_EQ(b.hits, 4);
  EXPECT_EQ(post("/admin/nodes/drain", json{{"url", a.url()}, {"drain", false}}.dump()).status, 200);
  EXPECT_EQ(post("/admin/nodes/remove", json{{"url", b.url()}}.dump()).status, 200);
  EXPECT_EQ(post("/admin/nodes/remove", json{{"url", b.url()}}.dump()).status, 404);
  for (int i = 0; i < 2; ++i) post("/v1/completions", R"({"model":"m","prompt":"x"})");
  EXPECT_EQ(a.hits, 2);
  auto health = json::parse(get("/health").body);
  EXPECT_EQ(health["nodes"], 1);
  auto metrics = get("/metrics");
  EXPECT_NE(metrics.body.find("tessera_router_requests_total"), std::string::npos);
  EXPECT_NE(metrics.body.find("tessera_router_node_in_flight{node=\"" + a.url() + "\"} 0"), std::string::npos)
      << metrics.body;
}

std::string pd_info(const std::string& role, const std::string& host) {
  return json{{"role", role}, {"agent", "name=" + role + " host=" + host + " tcp=127.0.0.1:1"}}.dump();
}

// Two models behind one router, each on a prefill + decode pair: a request reaches only its model's decode node
// with its model's prefill node named, /tokenize follows the body's model too, and a model nobody serves is a
// 404 in OpenAI's shape before any node is tried.
TEST_F(GatewayTest, ManyModelsRouteByNameAndPairsNeverCrossModels) {
  FakeNode pa("alpha", pd_info("prefill", "h")), da("alpha", pd_info("decode", "h")),
      pb("beta", pd_info("prefill", "h")), db("beta", pd_info("decode", "h"));
  GatewayOptions o;
  o.health.probe_interval_ms = 20;
  start({pa.url(), da.url(), pb.url(), db.url()}, o);
  auto all_known = [&] {
    json list = json::parse(get("/admin/nodes").body)["nodes"];
    int known = 0;
    for (const auto& n : list) known += !n.value("role", "").empty() && !n["models"].empty() ? 1 : 0;
    return known == 4;
  };
  for (int i = 0; i < 200 && !all_known(); ++i) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(all_known());
  for (int i = 0; i < 4; ++i) {
    for (const char* model : {"alpha", "beta"}) {
      const bool alpha = std::string(model) == "alpha";
      auto r = post("/v1/completions", json{{"model", model}, {"prompt", "x"}}.dump());
      ASSERT_EQ(r.status, 200) << r.body;
      EXPECT_EQ(r.headers["x-tessera-node"], alpha ? da.url() : db.url()) << model;
      EXPECT_EQ(r.headers["x-tessera-prefill-node"], alpha ? pa.url() : pb.url()) << model;
    }
  }
  EXPECT_EQ(da.hits, 4);
  EXPECT_EQ(db.hits, 4);
  EXPECT_EQ(da.prefill_header(), pa.url());
  EXPECT_EQ(db.prefill_header(), pb.url());
  // Streams too, and chat.
  auto s =
      post("/v1/chat/completions",
           json{{"model", "beta"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"stream", true}}.dump());
  EXPECT_EQ(s.status, 200);
  EXPECT_EQ(s.headers["x-tessera-node"], db.url());
  const int before = da.hits + db.hits + pa.hits + pb.hits;
  auto unknown = post("/v1/completions", R"({"model":"gamma","prompt":"x"})");
  expect_openai_error(unknown, 404, "model");
  EXPECT_EQ(json::parse(unknown.body)["error"]["code"], "model_not_found");
  EXPECT_NE(unknown.body.find("alpha"), std::string::npos) << "the served models are named: " << unknown.body;
  expect_openai_error(post("/tokenize", R"({"model":"gamma","prompt":"x"})"), 404, "model");
  EXPECT_EQ(da.hits + db.hits + pa.hits + pb.hits, before) << "a request for an unknown model reached a node";
  // /tokenize goes to a node of the body's model.
  const int beta_before = db.hits + pb.hits;
  EXPECT_EQ(post("/tokenize", R"({"model":"beta","prompt":"x"})").status, 200);
  EXPECT_EQ(db.hits + pb.hits, beta_before + 1);
  // The beta decode node drained: beta has no decode node, so its prefill node is not paired with alpha's.
  EXPECT_EQ(post("/admin/nodes/drain", json{{"url", db.url()}}.dump()).status, 200);
  auto r = post("/v1/completions", R"({"model":"beta","prompt":"x"})");
  EXPECT_NE(r.headers["x-tessera-node"], da.url()) << "a beta request went to alpha's decode node";
  EXPECT_EQ(da.hits, 4);
  json listed = json::parse(get("/admin/nodes").body)["nodes"];
  for (const auto& n : listed) EXPECT_EQ(n["models"].size(), 1u) << n.dump();
}

// Names from the control plane count before the first /health answer; a node whose names are not known yet
// takes a request only when no known node serves the model.
TEST(ServingModel, KnownNamesFirstThenUnknownNodes) {
  NodeSnapshot a{.url = "a", .models = {"alpha"}}, b{.url = "b", .models = {"beta", "b2"}}, u{.url = "u"};
  auto urls = [](const std::vector<NodeSnapshot>& v) {
    std::vector<std::string> out;
    for (const auto& n : v) out.push_back(n.url);
    return out;
  };
  EXPECT_EQ(urls(serving_model({a, b, u}, "alpha")), std::vector<std::string>{"a"});
  EXPECT_EQ(urls(serving_model({a, b, u}, "b2")), std::vector<std::string>{"b"});
  EXPECT_EQ(urls(serving_model({a, b, u}, "gamma")), std::vector<std::string>{"u"});
  EXPECT_EQ(urls(serving_model({a, b}, "gamma")), std::vector<std::string>{});
  EXPECT_EQ(urls(serving_model({a, b, u}, "")), (std::vector<std::string>{"a", "b", "u"}));
  NodeRegistry reg(SteadyClock::instance());
  reg.add("http://a:1");
  EXPECT_TRUE(reg.may_serve("anything")) << "a node whose names are not known may serve it";
  reg.set_models("http://a:1", {"alpha"});
  EXPECT_TRUE(reg.may_serve("alpha"));
  EXPECT_FALSE(reg.may_serve("gamma"));
  EXPECT_EQ(reg.models(), std::vector<std::string>{"alpha"});
}

// PD mode: roles and hosts learnt from /internal/pd/info; the router sends client requests to the decode
// node only, naming the prefill node it chose (same host first, the other when that one is drained), and
// never forwards a client's own x-tessera-prefill-node header.
TEST_F(GatewayTest, PrefillDecodePairsAreChosenByTheRouter) {
  FakeNode near("m", pd_info("prefill", "hostB")), far("m", pd_info("prefill", "hostA")),
      decode("m", pd_info("decode", "hostB")), colocated("m");
  GatewayOptions o;
  o.health.probe_interval_ms = 20;
  start({near.url(), far.url(), decode.url()}, o);
  auto roles_known = [&] {
    json list = json::parse(get("/admin/nodes").body)["nodes"];
    int known = 0;
    for (const auto& n : list) known += n.value("role", "").empty() ? 0 : 1;
    return known == 3;
  };
  for (int i = 0; i < 200 && !roles_known(); ++i) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(roles_known());
  for (int i = 0; i < 3; ++i) {
    auto r = post("/v1/completions", R"({"model":"m","prompt":"x"})", {{"x-tessera-prefill-node", "http://evil:1"}});
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.headers["x-tessera-prefill-node"], near.url());
    EXPECT_EQ(r.headers["x-tessera-node"], decode.url()) << "the client is told which node answered";
  }
  EXPECT_EQ(decode.hits, 3);
  EXPECT_EQ(near.hits + far.hits, 0) << "client requests went to a prefill node";
  EXPECT_EQ(decode.prefill_header(), near.url());
  // Streams name it too.
  auto s = post("/v1/completions", R"({"model":"m","prompt":"x","stream":true})");
  EXPECT_EQ(s.headers["x-tessera-prefill-node"], near.url());
  EXPECT_EQ(s.headers["x-tessera-node"], decode.url());
  // The near one drained: the far one (over tcp) is the only choice left.
  EXPECT_EQ(post("/admin/nodes/drain", json{{"url", near.url()}}.dump()).status, 200);
  post("/v1/completions", R"({"model":"m","prompt":"x"})");
  EXPECT_EQ(decode.prefill_header(), far.url());
  auto metrics = get("/metrics").body;
  EXPECT_NE(metrics.find("tessera_router_pd_pairs_total{link=\"shm\"} 4"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("tessera_router_pd_pairs_total{link=\"tcp\"} 1"), std::string::npos) << metrics;
  // Without a decode node in rotation, a colocated node serves whole requests and no prefill node is named.
  EXPECT_EQ(post("/admin/nodes/drain", json{{"url", decode.url()}}.dump()).status, 200);
  EXPECT_EQ(post("/admin/nodes", json{{"url", colocated.url()}}.dump()).status, 201);
  auto whole = post("/v1/completions", R"({"model":"m","prompt":"x"})");
  EXPECT_EQ(whole.status, 200);
  EXPECT_EQ(colocated.hits, 1);
  EXPECT_EQ(colocated.prefill_header(), "");
  EXPECT_EQ(whole.headers.count("x-tessera-prefill-node"), 0u);
  EXPECT_EQ(whole.headers["x-tessera-node"], colocated.url());
}

// A node that accepts requests and never answers them: once its probes fail, what waits on it is retried
// elsewhere instead of waiting for the upstream timeout (10 minutes by default).
TEST_F(GatewayTest, RequestsOnAHungNodeMoveWhenItLeavesRotation) {
  for (bool stream : {false, true}) {
    FakeNode hung, good;
    std::mutex mu;
    std::vector<WriterPtr> held;
    hung.handler = [&](const http::Request&, WriterPtr w) {
      std::lock_guard lock(mu);
      held.push_back(std::move(w));
    };
    GatewayOptions o;
    o.health.probe_interval_ms = 50;
    o.health.probe_timeout_ms = 200;
    start({hung.url()}, o);
    http::Response answer;
    const auto t0 = std::chrono::steady_clock::now();
    std::thread client([&] {
      answer = post("/v1/completions", json{{"model", "m"}, {"prompt", "x"}, {"stream", stream}}.dump());
    });
    for (int i = 0; i < 500 && hung.hits == 0; ++i) std::this_thread::sleep_for(2ms);
    ASSERT_EQ(hung.hits, 1);
    gateway_->on_node_added({good.url(), 0});
    hung.healthy = false;  // its probes now fail: out of rotation after 2 of them
    client.join();
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(answer.status, 200) << answer.body;
    EXPECT_EQ(good.hits, 1);
    EXPECT_LT(waited, 3.0);
    gateway_->stop();
    gateway_.reset();
  }
}

TEST_F(GatewayTest, NoNodesIsA503) {
  start({});
  auto r = post("/v1/completions", R"({"model":"m","prompt":"x"})");
  expect_openai_error(r, 503);
  EXPECT_EQ(get("/health").status, 503);
}

// Internal fields stay internal (issue 20): client x-tessera-* headers never reach a node, whose only
// x-tessera-cluster-token is the router's own; a client body with tessera_resume is a 400 that reaches no
// node; /admin/* takes the cluster token, not an API key.
TEST_F(GatewayTest, ClientInternalFieldsNeverReachANodeAndAdminNeedsTheToken) {
  FakeNode node;
  std::mutex mu;
  http::Headers seen;
  node.handler = [&](const http::Request& r, WriterPtr w) {
    {
      std::lock_guard lock(mu);
      seen = r.headers;
    }
    w->send(200, R"({"choices":[{"text":"ab"}],"usage":{"completion_tokens":2}})");
  };
  GatewayOptions o;
  o.api_keys = {"sk-client"};
  o.cluster_token = std::move(ClusterToken::from_secret(std::string(48, 'r'))).value();
  start({node.url()}, o);
  const http::Headers client = {{"Authorization", "Bearer sk-client"},
                                {"x-tessera-cluster-token", "forged-by-the-client"},
                                {"x-tessera-prefill-node", "http://127.0.0.1:9"},
                                {"x-tessera-anything", "1"}};
  auto r = post("/v1/completions", R"({"model":"m","prompt":"hi","max_tokens":2})", client);
  ASSERT_EQ(r.status, 200) << r.body;
  // A public client is not told the cluster's internal addresses; a holder of the credential is.
  EXPECT_EQ(r.headers.count("x-tessera-node"), 0u) << r.headers["x-tessera-node"];
  EXPECT_EQ(r.headers.count("x-tessera-prefill-node"), 0u);
  auto operator_call = post("/v1/completions", R"({"model":"m","prompt":"hi","max_tokens":2})",
                            {{"Authorization", "Bearer sk-client"}, {"x-tessera-cluster-token", std::string(48, 'r')}});
  ASSERT_EQ(operator_call.status, 200) << operator_call.body;
  EXPECT_EQ(operator_call.headers["x-tessera-node"], node.url());
  {
    std::lock_guard lock(mu);
    EXPECT_EQ(seen["x-tessera-cluster-token"], std::string(48, 'r'));
    EXPECT_EQ(seen.count("x-tessera-prefill-node"), 0u);
    EXPECT_EQ(seen.count("x-tessera-anything"), 0u);
    EXPECT_EQ(seen.count("authorization"), 0u);  // the client's key is the router's business
  }
  const int hits = node.hits.load();
  auto forged = post("/v1/completions", R"({"model":"m","prompt":"hi","tessera_resume":{"tokens":[1,2]}})", client);
  expect_openai_error(forged, 400);
  EXPECT_EQ(node.hits.load(), hits);
  // /admin/*: the API key alone is not enough once a cluster token is configured.
  EXPECT_EQ(get("/admin/nodes", {{"Authorization", "Bearer sk-client"}}).status, 401);
  EXPECT_EQ(get("/admin/nodes", {{"x-tessera-cluster-token", "wrong"}}).status, 403);
  EXPECT_EQ(
      post("/admin/nodes/remove", "{\"url\": \"" + node.url() + "\"}", {{"Authorization", "Bearer sk-client"}}).status,
      401);
  EXPECT_EQ(get("/admin/nodes", {{"x-tessera-cluster-token", std::string(48, 'r')}}).status, 200);
  EXPECT_TRUE(gateway_->registry().contains(node.url()));
}

TEST(GatewayCreate, UnknownStrategyIsAnError) {
  GatewayOptions o;
  o.strategy = "nope";
  auto g = Gateway::create(o);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("round_robin"), std::string::npos);
}

}  // namespace
}  // namespace tessera::router
