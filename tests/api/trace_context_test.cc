// W3C trace context and request ids (api/trace_context.h), on the spec's own examples.
#include "api/trace_context.h"

#include <gtest/gtest.h>

namespace tessera::api {
namespace {

TEST(TraceContext, ParsesTheSpecsExampleAndMakesChildrenOfTheSameTrace) {
  auto t = TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(t->parent_id, "00f067aa0ba902b7");
  EXPECT_EQ(t->flags, "01");
  EXPECT_EQ(t->header(), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  const TraceContext c = t->child();
  EXPECT_EQ(c.trace_id, t->trace_id);
  EXPECT_NE(c.parent_id, t->parent_id);
  EXPECT_EQ(c.parent_id.size(), 16u);
  EXPECT_TRUE(TraceContext::parse(c.header()).has_value());
  // A later version's extra fields are allowed after its first four.
  EXPECT_TRUE(TraceContext::parse("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-holds"));
}

TEST(TraceContext, InvalidHeadersStartANewTrace) {
  for (const char* bad : {"", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
                          "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  // all-zero trace id
                          "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  // all-zero span id
                          "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  // upper case
                          "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  // version ff
                          "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra"}) {
    EXPECT_FALSE(TraceContext::parse(bad).has_value()) << bad;
    const TraceContext t = trace_of(bad);
    EXPECT_TRUE(TraceContext::parse(t.header()).has_value()) << t.header();
  }
  EXPECT_NE(trace_of("").trace_id, trace_of("").trace_id);
}

TEST(RequestId, TheClientsIsKeptWhenUsable) {
  EXPECT_EQ(request_id_of("abc-123", "rt"), "abc-123");
  for (const std::string& bad : {std::string(), std::string(201, 'x'), std::string("has space"), std::string("nl\n")}) {
    const std::string id = request_id_of(bad, "rt");
    EXPECT_EQ(id.rfind("rt-", 0), 0u) << id;
    EXPECT_EQ(id.size(), 19u) << id;
  }
}

}  // namespace
}  // namespace tessera::api
