// The wire contract's own rules: the Status<->HTTP table both ways, the OpenAI error shape of a Status, the
// canonical KV layout's arithmetic against a hand-laid buffer, roles, and that every body a node writes is
// read back to the same values by the reader its peer uses (so the two sides cannot drift apart).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/health.h"
#include "api/http_status.h"
#include "api/kv_layout.h"
#include "api/openai.h"
#include "api/pd_messages.h"
#include "api/roles.h"

namespace tessera::api {
namespace {

TEST(HttpStatus, TableAndItsInverseAgree) {
  // Every code the table gives a distinct HTTP status comes back as itself.
  for (StatusCode c : {StatusCode::kInvalidArgument, StatusCode::kUnauthenticated, StatusCode::kPermissionDenied,
                       StatusCode::kNotFound, StatusCode::kAlreadyExists, StatusCode::kResourceExhausted,
                       StatusCode::kUnimplemented, StatusCode::kUnavailable, StatusCode::kDeadlineExceeded}) {
    EXPECT_EQ(status_from_http(http_status(c), "m").code(), c) << status_code_name(c);
  }
  EXPECT_EQ(http_status(StatusCode::kOk), 200);
  EXPECT_EQ(http_status(StatusCode::kOutOfRange), 400);  // a bad token id is the client's fault
  EXPECT_EQ(http_status(StatusCode::kCancelled), 503);   // shutdown: retry elsewhere
  EXPECT_EQ(http_status(StatusCode::kInternal), 500);
  EXPECT_EQ(http_status(StatusCode::kDataLoss), 500);
  EXPECT_EQ(status_from_http(413, "big").code(), StatusCode::kResourceExhausted);
  Status odd = status_from_http(418, "teapot");
  EXPECT_EQ(odd.code(), StatusCode::kInternal);
  EXPECT_EQ(odd.message(), "HTTP 418: teapot");
}

TEST(HttpStatus, OpenAiErrorShapeOfAStatus) {
  ApiError busy = error_for(resource_exhausted("queue full"));
  EXPECT_EQ(busy.status, 429);
  EXPECT_EQ(busy.type, "rate_limit_error");
  EXPECT_EQ(busy.code, "server_busy");
  EXPECT_EQ(busy.message, "queue full");
  EXPECT_EQ(error_for(invalid_argument("x")).type, "invalid_request_error");
  EXPECT_EQ(error_for(out_of_range("x")).status, 400);
  EXPECT_EQ(error_for(cancelled("x")).type, "service_unavailable");
  EXPECT_EQ(error_for(internal_error("x")).type, "server_error");
  const auto body = nlohmann::json::parse(error_body(busy));
  EXPECT_EQ(body["error"]["code"], "server_busy");
  EXPECT_TRUE(body["error"]["param"].is_null());
}

TEST(KvLayout, OffsetsMatchTheCanonicalOrder) {
  // [layer][k|v][position][kv_dim] laid out by hand for 3 layers x 5 positions x kv_dim 4, f32.
  const KvLayout l{3, 4, DType::kF32, 5};
  EXPECT_EQ(l.row_bytes(), 16u);
  EXPECT_EQ(l.half_bytes(), 80u);
  EXPECT_EQ(l.bytes(), 3u * 2 * 5 * 4 * 4);
  std::vector<float> buf(l.bytes() / sizeof(float));
  size_t i = 0;
  for (int layer = 0; layer < 3; ++layer) {
    for (int which = 0; which < 2; ++which) {
      for (int p = 0; p < 5; ++p) {
        for (int d = 0; d < 4; ++d) buf[i++] = static_cast<float>(layer * 1000 + which * 100 + p * 10 + d);
      }
    }
  }
  const auto* bytes = reinterpret_cast<const uint8_t*>(buf.data());
  float k = 0, v = 0;
  std::memcpy(&k, bytes + l.k_offset(2, 3), sizeof k);
  std::memcpy(&v, bytes + l.v_offset(1, 4), sizeof v);
  EXPECT_EQ(k, 2030.0f);
  EXPECT_EQ(v, 1140.0f);
  EXPECT_EQ((KvLayout{2, 8, DType::kF16, 16}.bytes()), 2u * 2 * 16 * 8 * 2);  // f16: 2 bytes a value
}

TEST(KvLayout, TheStateSectionFollowsTheKvSectionAndVersionOneIsTheEmptyState) {
  // Version 2: a hybrid model's recurrent state (24 bytes here) right after the kv section.
  const KvLayout with_state{3, 4, DType::kF32, 5, 24};
  EXPECT_EQ(kKvLayoutVersion, 2);
  EXPECT_EQ(with_state.kv_bytes(), 3u * 2 * 5 * 4 * 4);
  EXPECT_EQ(with_state.state_offset(), with_state.kv_bytes());
  EXPECT_EQ(with_state.state_bytes(), 24u);
  EXPECT_EQ(with_state.bytes(), with_state.kv_bytes() + 24);
  EXPECT_EQ(with_state.v_offset(2, 4) + with_state.row_bytes(), with_state.state_offset())
      << "the last V row ends there";
  // Without state every offset and size is version 1's, byte for byte.
  const KvLayout attention_only{3, 4, DType::kF32, 5};
  EXPECT_EQ(attention_only.bytes(), attention_only.kv_bytes());
  EXPECT_EQ(attention_only.k_offset(1, 2), with_state.k_offset(1, 2));
}

TEST(Roles, NamesRoundTripAndUnknownIsAClearError) {
  for (NodeRole r : {NodeRole::kBoth, NodeRole::kPrefill, NodeRole::kDecode}) EXPECT_EQ(*parse_role(role_name(r)), r);
  auto bad = parse_role("oracle");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "unknown role 'oracle'; roles: prefill, decode, both");
}

TEST(WireBodies, WhatOneSideWritesTheOtherReads) {
  PrefillCall call;
  call.prompt = {1, 5, 9, 7};
  call.export_from = 2;
  call.sampling.temperature = 0.5f;
  call.sampling.seed = 42;
  call.agent = "name=d host=h";
  call.region = "r";
  call.offset = 128;
  call.tag = 7;
  call.model = {{"name", "m"}};
  auto back = parse_prefill_call(prefill_call_body(call), 16, 64);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->prompt, call.prompt);
  EXPECT_EQ(back->export_from, 2);
  EXPECT_EQ(back->sampling.temperature, 0.5f);
  EXPECT_EQ(back->sampling.seed, 42u);
  EXPECT_EQ(back->offset, 128u);
  EXPECT_EQ(back->tag, 7u);
  EXPECT_EQ(back->model, call.model);
  EXPECT_FALSE(back->every_position);  // absent: a decode node older than the field
  call.every_position = true;
  auto every = parse_prefill_call(prefill_call_body(call), 16, 64);
  ASSERT_TRUE(every.ok()) << every.status().to_string();
  EXPECT_TRUE(every->every_position);

  PrefillReply reply;
  reply.first_token = 3;
  reply.checksum = 99;
  reply.bytes = 4096;
  reply.compute_ms = 12.5;
  auto r = parse_prefill_reply(prefill_reply_body(reply), 4096, 16);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->first_token, 3);
  EXPECT_EQ(r->checksum, 99u);
  EXPECT_EQ(r->compute_ms, 12.5);
  EXPECT_FALSE(parse_prefill_reply(prefill_reply_body(reply), 8192, 16).ok());  // another transfer's size
  // Asked for logprobs: the first token's must come, naming that token, with no more alternatives than asked.
  EXPECT_FALSE(parse_prefill_reply(prefill_reply_body(reply), 4096, 16, 1, 2).ok()) << "missing first_logprobs";
  reply.first_logprobs = {{3, -0.5f, {{3, -0.5f}, {7, -1.5f}}}};
  auto lp = parse_prefill_reply(prefill_reply_body(reply), 4096, 16, 1, 2);
  ASSERT_TRUE(lp.ok()) << lp.status().to_string();
  ASSERT_EQ(lp->first_logprobs.size(), 1u);
  EXPECT_FLOAT_EQ(lp->first_logprobs[0].logprob, -0.5f);
  EXPECT_EQ(lp->first_logprobs[0].top[1].first, 7);
  EXPECT_FALSE(parse_prefill_reply(prefill_reply_body(reply), 4096, 16, 1, 1).ok()) << "more alternatives than asked";
  reply.first_logprobs = {{4, -0.5f, {}}};
  EXPECT_FALSE(parse_prefill_reply(prefill_reply_body(reply), 4096, 16, 1, 2).ok()) << "another token's logprob";
  reply.first_logprobs = {{3, 2.0f, {}}};
  EXPECT_FALSE(parse_prefill_reply(prefill_reply_body(reply), 4096, 16, 1, 2).ok()) << "a probability above 1";
  reply.first_logprobs = {{3, -0.5f, {{99, -1.0f}}}};
  EXPECT_FALSE(parse_prefill_reply(prefill_reply_body(reply), 4096, 16, 1, 2).ok()) << "a token outside the vocabulary";
  reply.first_logprobs.clear();

  auto info = parse_pd_info(pd_info_body(NodeRole::kPrefill, "name=p host=vm/1 tcp=x", {{"name", "m"}}));
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->role, "prefill");
  EXPECT_EQ(info->host_id, "vm/1");
}

TEST(Health, BodyAndTheCapacityTheRouterBelieves) {
  const std::string body = health_body({"m", {"m", "alias"}, "cpu", "host", 1, 2, 3, 400});
  EXPECT_EQ(
      body,
      R"({"backend":"cpu","device":"host","kv_blocks_total":400,"kv_blocks_used":3,"model":"m","models":["m","alias"],"runner":"generate","running":2,"status":"ok","waiting":1})");
  // The router routes by these names: every one the node answers to, the model alone from an older node.
  EXPECT_EQ(health_models(body), (std::vector<std::string>{"m", "alias"}));
  EXPECT_EQ(health_models(R"({"model":"old"})"), std::vector<std::string>{"old"});
  EXPECT_EQ(health_models(R"({"models":[1,"",{"a":1},"ok"]})"), std::vector<std::string>{"ok"});
  EXPECT_TRUE(health_models(R"({"status":"ok"})").empty());
  EXPECT_TRUE(health_models("not json").empty());
  EXPECT_EQ(health_capacity(body), 400);
  EXPECT_EQ(health_runner(body), "generate");  // the router sends /v1/embeddings only to "pooling" nodes
  EXPECT_EQ(health_capacity(R"({"kv_blocks_total":1e300})"), 0);
  EXPECT_EQ(health_capacity(R"({"kv_blocks_total":-5})"), 0);
  EXPECT_EQ(health_capacity("not json"), 0);
}

}  // namespace
}  // namespace tessera::api
