// `tessera bench conversations` and vLLM's return_token_ids against real `tessera serve` processes: the replay sends
// each turn with the whole history (the replies' own token ids), the nodes' prefix caches supply each history, and
// the replies are the same token for token as on a node without a prefix cache, which supplies nothing (the control).
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "http/http.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera {
namespace {

using json = nlohmann::json;
using testing::tessera_bin;

json post(const std::string& url, const std::string& path, const json& body) {
  auto r = http::fetch({.method = "POST",
                        .url = url + path,
                        .headers = {{"Content-Type", "application/json"}},
                        .body = body.dump(),
                        .timeout_ms = 30000});
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (!r.ok()) return json();
  EXPECT_EQ(r->status, 200) << r->body;
  return json::parse(r->body, nullptr, false);
}

TEST(ReturnTokenIds, StreamedAndWholeRepliesCarryTheSameIdsAndTheyDetokenizeToTheText) {
  TS_REQUIRE_STORIES260K();
  testing::BackgroundProcess node({tessera_bin(), "serve", "--model", testing::stories260k_dir(), "--port", "0"});
  const std::string url =
      "http://127.0.0.1:" + std::to_string(testing::port_from_line(node.wait_for_line("listening")));
  const json prompt = {1, 403, 261, 306, 271};
  json whole = post(url, "/v1/completions",
                    {{"model", "stories260K"},
                     {"prompt", prompt},
                     {"max_tokens", 12},
                     {"temperature", 0},
                     {"return_token_ids", true}});
  ASSERT_TRUE(whole.is_object());
  const json& choice = whole["choices"][0];
  EXPECT_EQ(choice["prompt_token_ids"], prompt);
  ASSERT_EQ(choice["token_ids"].size(), whole["usage"]["completion_tokens"].get<size_t>());
  json text = post(url, "/detokenize", {{"model", "stories260K"}, {"tokens", choice["token_ids"]}});
  EXPECT_EQ(text["prompt"], choice["text"]);

  std::string events;
  auto streamed = http::fetch_streaming({.method = "POST",
                                         .url = url + "/v1/completions",
                                         .headers = {{"Content-Type", "application/json"}},
                                         .body = json{{"model", "stories260K"},
                                                      {"prompt", prompt},
                                                      {"max_tokens", 12},
                                                      {"temperature", 0},
                                                      {"stream", true},
                                                      {"return_token_ids", true}}
                                                     .dump(),
                                         .timeout_ms = 30000},
                                        [&](std::string_view d) {
                                          events.append(d);
                                          return true;
                                        });
  ASSERT_TRUE(streamed.ok());
  json ids = json::array(), prompt_ids;
  int with_prompt = 0;
  for (size_t at = 0; (at = events.find("data: {", at)) != std::string::npos; ++at) {
    json chunk = json::parse(events.substr(at + 6, events.find("\n\n", at) - at - 6));
    const json& c = chunk["choices"][0];
    if (c.contains("prompt_token_ids")) {
      prompt_ids = c["prompt_token_ids"];
      with_prompt++;
    }
    for (const json& id : c.value("token_ids", json::array())) ids.push_back(id);
  }
  EXPECT_EQ(with_prompt, 1);  // the prompt's ids once, in the first chunk
  EXPECT_EQ(prompt_ids, prompt);
  EXPECT_EQ(ids, choice["token_ids"]);
  EXPECT_EQ(node.stop(SIGTERM), 0);
}

// Runs the replay (with `bench_extra` flags) against a fresh node started with `extra` flags; the report.
json replay(const std::vector<std::string>& extra, const std::vector<std::string>& bench_extra = {},
            const std::string& system_len = "96", const std::string& user_len = "16") {
  std::vector<std::string> args = {tessera_bin(), "serve", "--model", testing::stories260k_dir(), "--port", "0"};
  args.insert(args.end(), extra.begin(), extra.end());
  testing::BackgroundProcess node(args);
  const std::string url =
      "http://127.0.0.1:" + std::to_string(testing::port_from_line(node.wait_for_line("listening")));
  const std::string out = testing::scratch_dir() + "/conversations.json";
  std::vector<std::string> bench = {tessera_bin(),
                                    "bench",
                                    "conversations",
                                    "--url",
                                    url,
                                    "--tenants",
                                    "2",
                                    "--users-per-tenant",
                                    "2",
                                    "--turns",
                                    "4",
                                    "--system-len",
                                    system_len,
                                    "--user-len",
                                    user_len,
                                    "--output-len",
                                    "8",
                                    "--think",
                                    "0.2",
                                    "--ramp",
                                    "0.2",
                                    "--seed",
                                    "5",
                                    "--out",
                                    out};
  bench.insert(bench.end(), bench_extra.begin(), bench_extra.end());
  auto r = testing::run_process(bench, 120);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(node.stop(SIGTERM), 0);
  auto report = read_file(out);
  return report.ok() ? json::parse(*report, nullptr, false) : json();
}

TEST(BenchConversations, EachTurnSendsTheWholeHistoryAndTheCacheSuppliesItWithoutChangingAReply) {
  TS_REQUIRE_STORIES260K();
  const json cached = replay({});
  const json uncached = replay({"--no-prefix-cache"});
  ASSERT_TRUE(cached.is_object() && uncached.is_object());
  EXPECT_EQ(cached["completed"], 16);
  EXPECT_EQ(uncached["completed"], 16);
  std::map<std::pair<int, int>, json> by_turn;
  for (const json& q : cached["requests"]) by_turn[{q["user"].get<int>(), q["turn"].get<int>()}] = q;
  for (const auto& [key, q] : by_turn) {
    const auto [user, turn] = key;
    EXPECT_EQ(q["output_ids"].size(), 8u);
    if (turn == 0) {
      EXPECT_EQ(q["prompt_len"], 96 + 16);
      continue;
    }
    // The history grew by the last reply and a new message, and the node's cache held the last prompt's blocks.
    const json& last = by_turn.at({user, turn - 1});
    EXPECT_EQ(q["prompt_len"].get<int>(), last["prompt_len"].get<int>() + 8 + 16);
    EXPECT_GE(q["cached_tokens"].get<int>(), last["prompt_len"].get<int>() / 16 * 16) << user << "/" << turn;
  }
  EXPECT_GT(cached["hit_rate"].get<double>(), 0.5);
  EXPECT_LE(cached["hit_rate"].get<double>(), cached["oracle_hit_rate"].get<double>() + 1e-9);
  // The control: no prefix cache supplies nothing, and every reply is the same.
  EXPECT_EQ(uncached["cached_tokens"], 0);
  EXPECT_GT(uncached["oracle_hit_rate"].get<double>(), 0.5);
  ASSERT_EQ(uncached["requests"].size(), cached["requests"].size());
  for (size_t i = 0; i < cached["requests"].size(); ++i)
    EXPECT_EQ(cached["requests"][i]["output_ids"], uncached["requests"][i]["output_ids"]) << i;
}

// --chat: the same replay as conversations through the node's chat template (system message, user messages of
// words, each reply's text sent back as the assistant's message). The node reports the ids it made of each prompt
// (return_token_ids), every later turn takes the earlier history from the cache, and no reply changes.
TEST(BenchConversations, ChatTurnsGoThroughTheTemplateAndTheCacheSuppliesTheHistory) {
  TS_REQUIRE_STORIES260K();
  // stories260K's context is 512 tokens, and its small vocabulary spells words in several tokens each.
  const json cached = replay({"--chat-template", "chatml"}, {"--chat"}, "24", "4");
  const json uncached = replay({"--chat-template", "chatml", "--no-prefix-cache"}, {"--chat"}, "24", "4");
  ASSERT_TRUE(cached.is_object() && uncached.is_object());
  EXPECT_EQ(cached["chat"], true);
  EXPECT_EQ(cached["completed"], 16);
  EXPECT_EQ(uncached["completed"], 16);
  std::map<std::pair<int, int>, json> by_turn;
  for (const json& q : cached["requests"]) by_turn[{q["user"].get<int>(), q["turn"].get<int>()}] = q;
  for (const auto& [key, q] : by_turn) {
    const auto [user, turn] = key;
    EXPECT_EQ(q["output_ids"].size(), 8u);
    EXPECT_GT(q["prompt_len"].get<int>(), 28) << "28 words, and the template's markers";
    if (turn == 0) continue;
    const json& last = by_turn.at({user, turn - 1});
    EXPECT_GT(q["prompt_len"].get<int>(), last["prompt_len"].get<int>() + 16) << user << "/" << turn;
    EXPECT_GE(q["cached_tokens"].get<int>(), last["prompt_len"].get<int>() / 2) << user << "/" << turn;
  }
  EXPECT_GT(cached["hit_rate"].get<double>(), 0.4);
  EXPECT_LE(cached["hit_rate"].get<double>(), cached["oracle_hit_rate"].get<double>() + 1e-9);
  EXPECT_EQ(uncached["cached_tokens"], 0);
  for (size_t i = 0; i < cached["requests"].size(); ++i)
    EXPECT_EQ(cached["requests"][i]["output_ids"], uncached["requests"][i]["output_ids"]) << i;
}

}  // namespace
}  // namespace tessera
