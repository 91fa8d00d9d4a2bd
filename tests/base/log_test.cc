// Log lines as an operator reads them (base/log.h): text and JSON, levels filtered, request ids and trace ids on
// the lines about one request, access lines with their fields; JSON lines parse as JSON whatever the message holds.
#include "base/log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace tessera::log {
namespace {

// Everything written to stderr while `body` runs.
template <class Body>
std::string captured(Body body) {
  std::fflush(stderr);
  char path[] = "/tmp/tessera-log-test-XXXXXX";
  const int fd = mkstemp(path);
  const int saved = dup(2);
  dup2(fd, 2);
  body();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  std::remove(path);
  return s.str();
}

class Log : public ::testing::Test {
 protected:
  void TearDown() override {
    set_level(Level::kWarn);
    set_format(Format::kText);
    set_component("tessera");
  }
};

TEST_F(Log, TextLinesCarryTimeLevelComponentAndRequestFields) {
  set_component("serve");
  set_level(Level::kInfo);
  const std::string out = captured([] {
    debug("hidden at info");
    info("loaded {}", "model.gguf");
    warn(Fields{"req-1", "4bf92f3577b34da6a3ce929d0e0e4736"}, "remote prefill failed: {}", "timeout");
  });
  EXPECT_EQ(out.find("hidden"), std::string::npos) << out;
  std::istringstream lines(out);
  std::string first, second;
  std::getline(lines, first);
  std::getline(lines, second);
  // 2026-12-03T10:50:28.123Z info  serve loaded model.gguf
  ASSERT_GE(first.size(), 25u) << out;
  EXPECT_EQ(first[4], '-');
  EXPECT_EQ(first[10], 'T');
  EXPECT_EQ(first[23], 'Z');
  EXPECT_EQ(first.substr(24), " info  serve loaded model.gguf");
  EXPECT_NE(second.find(" warn  serve remote prefill failed: timeout request_id=req-1 "
                        "trace_id=4bf92f3577b34da6a3ce929d0e0e4736"),
            std::string::npos)
      << second;
}

TEST_F(Log, JsonLinesParseAndAccessLinesHoldTheirFields) {
  set_component("route");
  set_level(Level::kInfo);
  set_format(Format::kJson);
  const std::string out = captured([] {
    info(Fields{"r\"2", ""}, "a message with \"quotes\", a tab\tand a newline\n");
    access({.method = "POST",
            .route = "/v1/chat/completions",
            .model = "m",
            .status = 200,
            .prompt_tokens = 12,
            .completion_tokens = 34,
            .ttft_ms = 5.5,
            .total_ms = 80.25,
            .request_id = "rt-7",
            .trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"});
  });
  std::istringstream lines(out);
  std::string line;
  std::vector<nlohmann::json> objs;
  while (std::getline(lines, line)) objs.push_back(nlohmann::json::parse(line));  // throws on a bad line
  ASSERT_EQ(objs.size(), 2u) << out;
  EXPECT_EQ(objs[0]["msg"], "a message with \"quotes\", a tab\tand a newline\n");
  EXPECT_EQ(objs[0]["request_id"], "r\"2");
  EXPECT_EQ(objs[0]["component"], "route");
  EXPECT_EQ(objs[0]["level"], "info");
  EXPECT_EQ(objs[1]["msg"], "access");
  EXPECT_EQ(objs[1]["status"], 200);
  EXPECT_EQ(objs[1]["prompt_tokens"], 12);
  EXPECT_EQ(objs[1]["completion_tokens"], 34);
  EXPECT_DOUBLE_EQ(objs[1]["ttft_ms"].get<double>(), 5.5);
  EXPECT_EQ(objs[1]["route"], "/v1/chat/completions");
  EXPECT_EQ(objs[1]["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
  // Access lines are info: at warn there are none.
  set_level(Level::kWarn);
  EXPECT_EQ(captured([] { access({.method = "GET", .route = "/", .status = 200}); }), "");
}

TEST_F(Log, LevelsAndFormatsParseByName) {
  EXPECT_EQ(*parse_level("debug"), Level::kDebug);
  EXPECT_EQ(*parse_level("warning"), Level::kWarn);
  EXPECT_EQ(*parse_level("off"), Level::kOff);
  EXPECT_EQ(parse_level("verbose").status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(parse_level("verbose").status().message().find("debug, info, warn, error or off"), std::string::npos);
  EXPECT_EQ(*parse_format("json"), Format::kJson);
  EXPECT_EQ(parse_format("xml").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera::log
