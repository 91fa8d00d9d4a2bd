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
  EXPECT_EQ(l.half_bytes(0), 80u);
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
  // Since version 2: a hybrid model's recurrent state (24 bytes here) right after the kv section.
  const KvLayout with_state{3, 4, DType::kF32, 5, 24};
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

TEST(KvLayout, SlidingLayersCarryOnlyTheirLastWindowPositions) {
  // Version 3: 4 layers, the 1st and 3rd sliding; 10 positions sent, the sliding layers carry the last 3 (a decode
  // node whose windows start 7 positions in). kv_dim 2, f32: 8 bytes a row. Laid out by hand: each layer's K rows
  // then its V rows, of the positions it carries.
  KvLayout l{4, 2, DType::kF32, 10, 16, {0, 1, 0, 1}, 3};
  EXPECT_EQ(kKvLayoutVersion, 3);
  EXPECT_EQ(l.carried(0), 10);
  EXPECT_EQ(l.carried(1), 3);
  EXPECT_EQ(l.first_carried(1), 7);
  std::vector<float> buf;
  for (int layer = 0; layer < 4; ++layer) {
    for (int which = 0; which < 2; ++which) {
      for (int p = l.first_carried(layer); p < 10; ++p) {
        for (int d = 0; d < 2; ++d) buf.push_back(static_cast<float>(layer * 1000 + which * 100 + p * 10 + d));
      }
    }
  }
  EXPECT_EQ(l.kv_bytes(), buf.size() * sizeof(float));
  EXPECT_EQ(l.kv_bytes(), (2u * 10 + 2u * 3) * 2 * 8);
  EXPECT_EQ(l.bytes(), l.kv_bytes() + 16) << "the state section follows";
  const auto* bytes = reinterpret_cast<const uint8_t*>(buf.data());
  auto at = [&](size_t offset) {
    float x = 0;
    std::memcpy(&x, bytes + offset, sizeof x);
    return x;
  };
  EXPECT_EQ(at(l.k_offset(0, 4)), 40.0f);
  EXPECT_EQ(at(l.k_offset(1, 7)), 1070.0f);
  EXPECT_EQ(at(l.v_offset(1, 9) + 4), 1191.0f);
  EXPECT_EQ(at(l.k_offset(2, 0)), 2000.0f);
  EXPECT_EQ(at(l.v_offset(3, 8)), 3180.0f);
  EXPECT_EQ(l.v_offset(3, 9) + l.row_bytes(), l.state_offset()) << "the last V row ends there";
  // Fewer positions sent than the window: every one, as a full layer.
  l.window_positions = 12;
  EXPECT_EQ(l.carried(1), 10);
  EXPECT_EQ(l.kv_bytes(), 4u * 2 * 10 * 8);
  // No windows (-1), or no sliding layers: version 2's offsets, byte for byte.
  const KvLayout v2{4, 2, DType::kF32, 10, 16};
  l.window_positions = -1;
  EXPECT_EQ(l.kv_bytes(), v2.kv_bytes());
  EXPECT_EQ(l.v_offset(3, 2), v2.v_offset(3, 2));
}

TEST(KvLayout, EachLayerCarriesRowsOfItsOwnWidth) {
  // gemma4-like: kv_dim 4 (the widest), the sliding layers 0 and 2 two values wide, carrying the last 3 of 5 positions.
  const KvLayout l{3, 4, DType::kF16, 5, 0, {1, 0, 1}, 3, {2, 4, 2}};
  EXPECT_EQ(l.row_bytes(0), 4u);
  EXPECT_EQ(l.row_bytes(1), 8u);
  EXPECT_EQ(l.row_bytes(), 8u) << "without a layer: the widest";
  EXPECT_EQ(l.layer_offset(1), 2u * 3 * 4);
  EXPECT_EQ(l.layer_offset(2), 2u * 3 * 4 + 2 * 5 * 8);
  EXPECT_EQ(l.kv_bytes(), 2u * 3 * 4 + 2 * 5 * 8 + 2 * 3 * 4);
  EXPECT_EQ(l.k_offset(2, 3), l.layer_offset(2) + 4);
  EXPECT_EQ(l.v_offset(1, 4), l.layer_offset(1) + 5 * 8 + 4 * 8);
  EXPECT_EQ(l.v_offset(2, 4) + l.row_bytes(2), l.kv_bytes());
}

TEST(Roles, NamesRoundTripAndUnknownIsAClearError) {
  for (NodeRole r : {NodeRole::kBoth, NodeRole::kPrefill, NodeRole::kDecode}) EXPECT_EQ(*parse_role(role_name(r)), r);
  auto bad = parse_role("oracle");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "unknown role 'oracle'; roles: prefill, decode, both");
}

TEST(WireBodies, TheKvCrossesInTheTypeTheDecodeNodeAskedFor) {
  PrefillCall call;
  call.prompt = {1, 5, 9, 7};
  call.agent = "name=d host=h";
  call.region = "r";
  auto plain = parse_prefill_call(prefill_call_body(call), 16, 64);
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  EXPECT_EQ(plain->kv_dtype, DType::kF32) << "absent: f32, as before the field";
  for (DType d : {DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
    call.kv_dtype = d;
    auto back = parse_prefill_call(prefill_call_body(call), 16, 64);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(back->kv_dtype, d) << dtype_name(d);
  }
  // Only a KV cache type: a weight type or an integer is not a row anyone keeps.
  for (const char* bad : {"q4_k", "i32", "f64", ""}) {
    nlohmann::json j = nlohmann::json::parse(prefill_call_body(call));
    j["kv_dtype"] = bad;
    auto r = parse_prefill_call(j.dump(), 16, 64);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("kv_dtype"), std::string::npos) << r.status().message();
  }
  nlohmann::json j = nlohmann::json::parse(prefill_call_body(call));
  j["kv_dtype"] = 16;
  EXPECT_FALSE(parse_prefill_call(j.dump(), 16, 64).ok()) << "not a string";
  EXPECT_TRUE(kv_wire_dtype(DType::kQ8_0));
  EXPECT_FALSE(kv_wire_dtype(DType::kQ4_K));

  // The reply names the type the rows were sent in; the decode node refuses any other (its staging range was sized
  // and will be read as the type it asked for), and a reply without the field as f32.
  PrefillReply reply;
  reply.first_token = 3;
  reply.bytes = 2048;
  reply.kv_dtype = DType::kF16;
  auto r = parse_prefill_reply(prefill_reply_body(reply), 2048, 16, 1, -1, DType::kF16);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->kv_dtype, DType::kF16);
  auto wrong = parse_prefill_reply(prefill_reply_body(reply), 2048, 16, 1, -1, DType::kF32);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().message(), "prefill reply: kv_dtype 'f16' but f32 was asked for");
  nlohmann::json old = nlohmann::json::parse(prefill_reply_body(reply));
  old.erase("kv_dtype");
  EXPECT_TRUE(parse_prefill_reply(old.dump(), 2048, 16).ok());
  EXPECT_FALSE(parse_prefill_reply(old.dump(), 2048, 16, 1, -1, DType::kQ8_0).ok());
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
  EXPECT_EQ(back->window_from, 2) << "absent: export_from, every row";
  call.window_from = 3;  // a decode node whose sliding layers keep only their windows
  auto windowed = parse_prefill_call(prefill_call_body(call), 16, 64);
  ASSERT_TRUE(windowed.ok()) << windowed.status().to_string();
  EXPECT_EQ(windowed->window_from, 3);
  call.window_from = 1;  // before the first position sent: every row
  EXPECT_EQ(parse_prefill_call(prefill_call_body(call), 16, 64)->window_from, 2);
  call.window_from = 5;  // past the prompt's end
  auto past = parse_prefill_call(prefill_call_body(call), 16, 64);
  ASSERT_FALSE(past.ok());
  EXPECT_EQ(past.status().message(), "prefill request: window_from is past the prompt's end");
  call.window_from = -1;

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
