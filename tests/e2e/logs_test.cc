// Following one request through a prefill/decode cluster by its logs (issue 32 item 3), with real processes: a
// router, a decode node and a prefill node, each logging to its own file. A request sent with an x-request-id and a
// W3C traceparent shows up by that id and trace id in all three logs (an access line in each: the router's client
// request, the decode node's API call, the prefill node's internal prefill call); a request without them gets an
// id the router makes, which the nodes log too; --log-level info shows the load lines, --log-format json lines
// parse as JSON objects, and --log-level warn drops the access lines.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "http/http.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

struct Proc {
  std::unique_ptr<testing::BackgroundProcess> p;
  std::string url;
  std::string log;  // its stderr
};

std::string shell_quote(const std::string& s) { return "'" + s + "'"; }

// `tessera ARGS 2> DIR/NAME.log`, through the shell (exec: the process is tessera itself).
Proc start(const std::string& dir, const std::string& name, const std::vector<std::string>& args) {
  Proc out;
  out.log = dir + "/" + name + ".log";
  std::string cmd = "exec " + shell_quote(testing::tessera_bin());
  for (const std::string& a : args) cmd += " " + shell_quote(a);
  cmd += " 2> " + shell_quote(out.log);
  out.p = std::make_unique<testing::BackgroundProcess>(std::vector<std::string>{"/bin/sh", "-c", cmd});
  const int port = testing::port_from_line(out.p->wait_for_line("listening on"));
  out.url = port > 0 ? "http://127.0.0.1:" + std::to_string(port) : "";
  return out;
}

std::string read_all(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::vector<std::string> lines_with(const std::string& text, const std::string& needle) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.find(needle) != std::string::npos) out.push_back(line);
  return out;
}

// Waits until `path` holds a line with `needle` (access lines are written as answers complete).
std::string wait_for_log(const std::string& path, const std::string& needle) {
  for (int i = 0; i < 100; ++i) {
    std::string text = read_all(path);
    if (text.find(needle) != std::string::npos) return text;
    std::this_thread::sleep_for(50ms);
  }
  return read_all(path);
}

TEST(Logs, OneRequestIsFollowedByItsIdThroughRouterDecodeAndPrefill) {
  TS_REQUIRE_STORIES260K();
  const std::vector<std::string> model = {"--model", testing::stories260k_dir(), "--port", "0"};
  auto with = [&](std::vector<std::string> a, const std::vector<std::string>& more) {
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  const std::string dir = testing::scratch_dir();  // once: each call empties it
  Proc prefill = start(dir, "prefill", with({"--log-level", "info", "serve"}, with(model, {"--role", "prefill"})));
  ASSERT_FALSE(prefill.url.empty());
  Proc decode = start(dir, "decode",
                      with({"serve"}, with(model, {"--chat-template", "plain", "--log-format", "json", "--role",
                                                   "decode", "--prefill-nodes", prefill.url, "--pd-min-tokens", "4"})));
  ASSERT_FALSE(decode.url.empty());
  Proc router = start(dir, "router", {"route", "--port", "0", "--nodes", decode.url});
  ASSERT_FALSE(router.url.empty());

  const std::string trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
  auto ask = [&](const http::Headers& extra) {
    http::Headers h = {{"Content-Type", "application/json"}};
    h.insert(extra.begin(), extra.end());
    auto r = http::fetch({.method = "POST",
                          .url = router.url + "/v1/chat/completions",
                          .headers = h,
                          .body = json{{"model", "stories260K"},
                                       {"messages", {{{"role", "user"}, {"content", "Once upon a time, Lily saw"}}}},
                                       {"max_tokens", 8},
                                       {"temperature", 0}}
                                      .dump(),
                          .timeout_ms = 60000});
    EXPECT_TRUE(r.ok() && r->status == 200) << (r.ok() ? r->body : r.status().to_string());
    return r.ok() ? r->headers["x-request-id"] : std::string();
  };
  EXPECT_EQ(ask({{"x-request-id", "follow-me-42"}, {"traceparent", "00-" + trace_id + "-00f067aa0ba902b7-01"}}),
            "follow-me-42");

  // The router (text): its access line, with the client's id and trace.
  const std::string rlog = wait_for_log(router.log, "follow-me-42");
  auto r_lines = lines_with(rlog, "request_id=follow-me-42");
  ASSERT_EQ(r_lines.size(), 1u) << rlog;
  EXPECT_NE(r_lines[0].find(" access "), std::string::npos) << r_lines[0];
  EXPECT_NE(r_lines[0].find("trace_id=" + trace_id), std::string::npos) << r_lines[0];
  EXPECT_NE(r_lines[0].find("status=200"), std::string::npos) << r_lines[0];
  EXPECT_NE(r_lines[0].find("route=/v1/chat/completions"), std::string::npos) << r_lines[0];

  // The decode node (JSON): every line an object; its access line with the id, trace, tokens and TTFT.
  const std::string dlog = wait_for_log(decode.log, "follow-me-42");
  std::istringstream in(dlog);
  std::string line;
  int access = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] != '{') continue;  // the startup warnings printed before logging is set up
    const json j = json::parse(line, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << line;
    if (j.value("request_id", "") != "follow-me-42") continue;
    EXPECT_EQ(j.value("trace_id", ""), trace_id) << line;
    if (j.value("msg", "") != "access") continue;
    ++access;
    EXPECT_EQ(j.value("status", 0), 200) << line;
    EXPECT_GT(j.value("prompt_tokens", 0), 0) << line;
    EXPECT_EQ(j.value("completion_tokens", 0), 8) << line;
    EXPECT_GE(j.value("ttft_ms", -1.0), 0.0) << line;
    EXPECT_EQ(j.value("component", ""), "serve") << line;
  }
  EXPECT_EQ(access, 1) << dlog;
  EXPECT_FALSE(lines_with(dlog, "\"msg\":\"loaded ").empty()) << "the load line, at the default info level";

  // The prefill node: its internal call, under the same id and trace.
  const std::string plog = wait_for_log(prefill.log, "follow-me-42");
  auto p_lines = lines_with(plog, "request_id=follow-me-42");
  ASSERT_EQ(p_lines.size(), 1u) << plog;
  EXPECT_NE(p_lines[0].find("route=/internal/pd/prefill"), std::string::npos) << p_lines[0];
  EXPECT_NE(p_lines[0].find("trace_id=" + trace_id), std::string::npos) << p_lines[0];
  EXPECT_FALSE(lines_with(plog, " info  serve loaded ").empty()) << plog;

  // Without an id or a trace: the router makes both, and the nodes log the router's.
  const std::string made = ask({});
  ASSERT_EQ(made.rfind("rt-", 0), 0u) << made;
  EXPECT_EQ(lines_with(wait_for_log(decode.log, made), made).size(), 1u);
  EXPECT_EQ(lines_with(wait_for_log(prefill.log, made), made).size(), 1u);
}

TEST(Logs, WarnLevelDropsAccessLines) {
  TS_REQUIRE_STORIES260K();
  Proc node = start(testing::scratch_dir(), "node",
                    {"serve", "--log-level", "warn", "--model", testing::stories260k_dir(), "--port", "0"});
  ASSERT_FALSE(node.url.empty());
  auto r = http::fetch({.method = "POST",
                        .url = node.url + "/v1/completions",
                        .headers = {{"Content-Type", "application/json"}, {"x-request-id", "quiet-1"}},
                        .body = R"({"model":"stories260K","prompt":"Once","max_tokens":4})"});
  ASSERT_TRUE(r.ok() && r->status == 200);
  std::this_thread::sleep_for(300ms);
  const std::string log = read_all(node.log);
  EXPECT_EQ(log.find("quiet-1"), std::string::npos) << log;
  EXPECT_EQ(log.find(" loaded "), std::string::npos) << log;
  // A bad level is a usage error naming the choices.
  auto bad = testing::run_process({testing::tessera_bin(), "--log-level", "loud", "serve", "--model", "x"}, 30.0);
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("debug, info, warn, error or off"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace tessera
