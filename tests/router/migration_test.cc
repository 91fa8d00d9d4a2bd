// StreamTracker: what the router remembers of a stream so another node can continue it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "router/migration.h"

namespace tessera::router {
namespace {

using json = nlohmann::json;

std::string chat_chunk(const std::string& content, bool role = false, const char* finish = nullptr) {
  json delta = role ? json{{"role", "assistant"}, {"content", content}} : json{{"content", content}};
  return "data: " +
         json{{"id", "chatcmpl-7"},
              {"created", 1234},
              {"choices",
               json::array({{{"index", 0}, {"delta", delta}, {"finish_reason", finish ? json(finish) : json()}}})}}
             .dump() +
         "\n\n";
}

TEST(StreamTracker, StripsTokenCommentsAndRemembersWhatTheClientHas) {
  std::string upstream = chat_chunk("", true) + ": tessera-tokens 5,6\n\n" + chat_chunk(" Hello") +
                         ": tessera-tokens 7\n\n" + chat_chunk("") + ": tessera-tokens 8\n\n";
  StreamTracker t;
  std::string forwarded;
  // One byte at a time: events split anywhere must still be forwarded whole and exactly once.
  for (char ch : upstream) forwarded += t.feed(std::string_view(&ch, 1));
  EXPECT_EQ(forwarded, chat_chunk("", true) + chat_chunk(" Hello") + chat_chunk(""));
  EXPECT_EQ(t.tokens(), 3u) << "token 8's data chunk never arrived: it is not the client's";
  EXPECT_TRUE(t.resumable());
  EXPECT_FALSE(t.done());
  json body = json::parse(*t.resume_body(R"({"model":"m","messages":[],"stream":true})"));
  EXPECT_EQ(body["model"], "m");
  const json& r = body["tessera_resume"];
  EXPECT_EQ(r["tokens"], json::array({5, 6, 7}));
  EXPECT_EQ(r["text_bytes"], 6);
  EXPECT_EQ(r["preamble_sent"], true);
  EXPECT_EQ(r["id"], "chatcmpl-7");
  EXPECT_EQ(r["created"], 1234);
}

TEST(StreamTracker, NothingSentYetMeansThePreambleIsStillDue) {
  StreamTracker t;
  EXPECT_EQ(t.feed(": tessera-tokens 1\n\n"), "");
  json r = json::parse(*t.resume_body("{}"))["tessera_resume"];
  EXPECT_EQ(r["tokens"], json::array());
  EXPECT_EQ(r["preamble_sent"], false);
}

TEST(StreamTracker, ErrorsDoneAndFinishAreSeen) {
  StreamTracker a;
  a.feed("data: {\"error\":{\"message\":\"x\"}}\n\n");
  EXPECT_TRUE(a.failed());
  EXPECT_FALSE(a.resumable());
  StreamTracker b;
  b.feed(": tessera-tokens 1\n\n" + chat_chunk("a", false, "length"));
  EXPECT_TRUE(b.finished());
  b.feed("data: [DONE]\n\n");
  EXPECT_TRUE(b.done());
  EXPECT_FALSE(b.resumable());
}

// n > 1 (or a list of prompts): several choices in one stream. It is finished only when every choice's
// finish_reason went through, and never resumable: a node continues one choice.
TEST(StreamTracker, AStreamOfSeveralChoicesFinishesWithItsLastAndNeverResumes) {
  StreamTracker t(false, 2);
  EXPECT_FALSE(t.resumable()) << "not even before any text";
  t.feed("data: {\"choices\":[{\"index\":1,\"text\":\"a\",\"finish_reason\":\"length\"}]}\n\n");
  EXPECT_FALSE(t.finished()) << "choice 0 is still going";
  t.feed("data: {\"choices\":[{\"index\":1,\"text\":\"\",\"finish_reason\":\"length\"}]}\n\n");
  EXPECT_FALSE(t.finished()) << "the same choice twice is still one";
  t.feed("data: {\"choices\":[{\"index\":0,\"text\":\"b\",\"finish_reason\":\"stop\"}]}\n\n");
  EXPECT_TRUE(t.finished());
}

// A node that dies after its last token's finish_reason: the router completes the stream with [DONE] itself, unless
// the client asked for the usage chunk and it never came; then the stream fails (the caller sends an error event)
// rather than end as if the client had not asked for usage (the fault suite's "only node SIGKILL" caught that).
TEST(StreamTracker, AStreamCutBeforeItsUsageChunkIsNotPassedOffAsComplete) {
  const std::string usage = "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\n\n";
  for (bool asked : {false, true}) {
    for (bool usage_sent : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "include_usage " << asked << ", usage sent " << usage_sent);
      StreamTracker t(false, 1, asked);
      t.feed(": tessera-tokens 1\n\n" + chat_chunk("a", false, "length") + (usage_sent ? usage : ""));
      EXPECT_EQ(t.usage_missing(), asked && !usage_sent);
      std::string written;
      int exchanges = 0;
      MigrationHooks hooks;
      hooks.pick = [](const std::set<std::string>&) { return std::string("http://other"); };
      hooks.exchange = [&](const std::string&, const std::string&, const std::function<bool(std::string_view)>&) {
        ++exchanges;
        return ok_status();
      };
      hooks.write = [&](const std::string& b) {
        written += b;
        return true;
      };
      hooks.client_gone = [] { return false; };
      std::set<std::string> tried = {"http://dead"};
      const Status s = migrate_stream(t, "{}", tried, 2, hooks);
      EXPECT_EQ(exchanges, 0) << "a finished stream is never sent to another node";
      if (asked && !usage_sent) {
        EXPECT_FALSE(s.ok());
        EXPECT_EQ(written, "");
      } else {
        EXPECT_TRUE(s.ok()) << s.message();
        EXPECT_EQ(written, "data: [DONE]\n\n");
      }
    }
  }
}

TEST(StreamTracker, TextWithoutTokenIdsCannotBeResumed) {
  StreamTracker t;  // a node that does not speak the extension
  t.feed(chat_chunk("", true) + chat_chunk(" Hi"));
  EXPECT_FALSE(t.resumable());
  EXPECT_FALSE(t.resume_body("not json").ok());
}

}  // namespace
}  // namespace tessera::router

namespace tessera::router {
namespace {

TEST(StreamTracker, AClientThatAsksForTokenIdsGetsThoseOfTheChunksItWasSent) {
  StreamTracker t(/*forward_ids=*/true);
  std::string out = t.feed(
      ": tessera-tokens 5,6\n\ndata: {\"choices\":[{\"text\":\"ab\",\"finish_reason\":null}]}\n\n"
      ": tessera-tokens 7\n\n");
  EXPECT_EQ(out, ": tessera-tokens 5,6\n\ndata: {\"choices\":[{\"text\":\"ab\",\"finish_reason\":null}]}\n\n");
}

}  // namespace
}  // namespace tessera::router
