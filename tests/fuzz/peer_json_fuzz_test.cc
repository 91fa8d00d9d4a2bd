// Peers are untrusted input (issue 20, item 3): what another node sends (a prefill reply, a prefill request,
// a control-plane value) goes through the decoders here, first as the known attacks (a string where a
// number belongs, missing, negative and huge values), then as seeded random mutations of valid bodies. Every
// one must come back as a value that respects its ranges or as a clean InvalidArgument: no exception, no
// crash. Deterministic (fixed seeds) and bounded (a fixed number of cases), so it runs in every ctest.
#include <gtest/gtest.h>

#include <random>

#include <nlohmann/json.hpp>

#include "api/pd_messages.h"
#include "base/json_fields.h"
#include "ctrl/json_codec.h"
#include "ctrl/registry.h"
#include "link/discovery.h"
#include "link/link.h"
#include "router/ctrl_membership.h"

namespace tessera {
namespace {

using json = nlohmann::json;

constexpr int kVocab = 512;
constexpr uint64_t kBytes = 4096;

json good_reply() {
  return {{"first_token", 17},  {"checksum", 0xfedcba9876543210ull},
          {"kv_dtype", "f32"},  {"bytes", kBytes},
          {"overlap", true},    {"compute_ms", 1.5},
          {"transfer_ms", 0.5}, {"transfer_wait_ms", 0.1},
          {"prefill_ms", 2.0}};
}

json good_call() {
  return {{"prompt", {1, 2, 3, 4, 5}},
          {"export_from", 0},
          {"sampling", {{"temperature", 0.0}, {"top_p", 1.0}, {"top_k", 0}, {"seed", 42}}},
          {"agent", "name=d1 host=h tcp=127.0.0.1:1"},
          {"region", "agent=d1 id=1 length=4096 kind=host shm=-"},
          {"offset", 0},
          {"tag", 99},
          {"model", {{"name", "m"}}}};
}

// Values of every JSON type, and the numbers at the edges of what the fields accept.
std::vector<json> hostile_values() {
  return {json("17"),
          json("not a number"),
          json(nullptr),
          json(true),
          json::array({1, 2}),
          json::object({{"a", 1}}),
          json(-1),
          json(-9223372036854775807LL - 1),
          json(18446744073709551615ull),
          json(1e300),
          json(-1e300),
          json(0.5),
          json(1u << 31),
          json(std::string(100000, 'x'))};
}

// Parsing never throws and the outcome is either OK or InvalidArgument with a message.
template <typename F>
void expect_clean(F&& parse, const std::string& body) {
  bool threw = false;
  try {
    auto r = parse(body);
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << body.substr(0, 200);
      EXPECT_FALSE(r.status().message().empty());
    }
  } catch (...) {
    threw = true;
  }
  EXPECT_FALSE(threw) << "threw on: " << body.substr(0, 300);
}

auto reply_parser() {
  return [](const std::string& b) { return api::parse_prefill_reply(b, kBytes, kVocab); };
}
auto call_parser() {
  return [](const std::string& b) { return api::parse_prefill_call(b, kVocab, 2048); };
}

TEST(PrefillReply, TheValidReplyParses) {
  auto r = api::parse_prefill_reply(good_reply().dump(), kBytes, kVocab);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->first_token, 17);
  EXPECT_EQ(r->checksum, 0xfedcba9876543210ull);
  EXPECT_DOUBLE_EQ(r->compute_ms, 1.5);
}

TEST(PrefillReply, TheReportedAttacksAreRefusedNamingTheField) {
  // The crash of issue 20: a string first_token or checksum aborted the decode node.
  for (const char* field : {"first_token", "checksum"}) {
    json j = good_reply();
    j[field] = "12";
    auto r = api::parse_prefill_reply(j.dump(), kBytes, kVocab);
    ASSERT_FALSE(r.ok()) << field;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(field), std::string::npos) << r.status().message();
  }
  json missing = good_reply();
  missing.erase("checksum");
  EXPECT_FALSE(api::parse_prefill_reply(missing.dump(), kBytes, kVocab).ok());
  json negative = good_reply();
  negative["first_token"] = -1;
  EXPECT_FALSE(api::parse_prefill_reply(negative.dump(), kBytes, kVocab).ok());
  json beyond = good_reply();
  beyond["first_token"] = kVocab;  // not a token of this model
  EXPECT_FALSE(api::parse_prefill_reply(beyond.dump(), kBytes, kVocab).ok());
  json huge_ms = good_reply();
  huge_ms["compute_ms"] = 1e300;  // would skew the stats
  EXPECT_FALSE(api::parse_prefill_reply(huge_ms.dump(), kBytes, kVocab).ok());
  json other_size = good_reply();
  other_size["bytes"] = kBytes * 2;
  EXPECT_FALSE(api::parse_prefill_reply(other_size.dump(), kBytes, kVocab).ok());
  for (const char* body : {"", "[]", "17", "null", "{", "\"x\""}) {
    EXPECT_FALSE(api::parse_prefill_reply(body, kBytes, kVocab).ok()) << body;
  }
}

TEST(PrefillCall, TheValidCallParsesAndBadFieldsAreRefused) {
  auto c = api::parse_prefill_call(good_call().dump(), kVocab, 2048);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->prompt.size(), 5u);
  EXPECT_EQ(c->tag, 99u);
  EXPECT_EQ(c->sampling.seed, 42u);
  const std::vector<std::pair<std::string, json>> bad = {{"prompt", json::array({1, "2"})},
                                                         {"prompt", json::array({kVocab})},
                                                         {"prompt", json::array({-3})},
                                                         {"prompt", json::array()},
                                                         {"export_from", 5},
                                                         {"export_from", -1},
                                                         {"tag", "99"},
                                                         {"offset", -4},
                                                         {"agent", 7},
                                                         {"sampling", {{"temperature", "hot"}}},
                                                         {"sampling", {{"top_k", 1e12}}},
                                                         {"sampling", 3}};
  for (const auto& [field, value] : bad) {
    json j = good_call();
    j[field] = value;
    auto r = api::parse_prefill_call(j.dump(), kVocab, 2048);
    EXPECT_FALSE(r.ok()) << field << " = " << value.dump();
  }
  json long_prompt = good_call();
  long_prompt["prompt"] = std::vector<int>(2049, 1);  // longer than this node's context
  EXPECT_FALSE(api::parse_prefill_call(long_prompt.dump(), kVocab, 2048).ok());
}

// Every field of a valid body replaced in turn by every hostile value, or removed.
template <typename Parse>
void every_field_every_value(const json& good, Parse parse) {
  for (auto it = good.begin(); it != good.end(); ++it) {
    for (const json& v : hostile_values()) {
      json j = good;
      j[it.key()] = v;
      expect_clean(parse, j.dump());
    }
    json j = good;
    j.erase(it.key());
    expect_clean(parse, j.dump());
  }
}

// Seeded random mutations of the serialised body: byte flips, truncations, insertions, nesting.
template <typename Parse>
void random_mutations(const json& good, Parse parse, uint64_t seed, int cases) {
  std::mt19937_64 rng(seed);
  const std::string base = good.dump();
  const std::string alphabet = "{}[]\",:0123456789-+.eE truefalsnul\\x";
  for (int i = 0; i < cases; ++i) {
    std::string s = base;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !s.empty(); ++e) {
      const size_t at = rng() % s.size();
      switch (rng() % 4) {
        case 0:
          s[at] = alphabet[rng() % alphabet.size()];
          break;
        case 1:
          s.resize(at);
          break;
        case 2:
          s.insert(at, 1, alphabet[rng() % alphabet.size()]);
          break;
        default:
          s[at] = static_cast<char>(rng() & 0xff);
      }
    }
    expect_clean(parse, s);
  }
}

TEST(PeerJsonFuzz, PrefillRepliesNeverThrow) {
  every_field_every_value(good_reply(), reply_parser());
  random_mutations(good_reply(), reply_parser(), 20261201, 3000);
}

TEST(PeerJsonFuzz, PrefillCallsNeverThrow) {
  every_field_every_value(good_call(), call_parser());
  const json sampling = good_call()["sampling"];
  for (auto it = sampling.begin(); it != sampling.end(); ++it) {
    for (const json& v : hostile_values()) {
      json j = good_call();
      j["sampling"][it.key()] = v;
      expect_clean(call_parser(), j.dump());
    }
  }
  random_mutations(good_call(), call_parser(), 7, 3000);
}

json good_node() {
  return {{"id", "n1"},       {"role", "decode"}, {"backend", "cpu"}, {"address", "http://127.0.0.1:9000"},
          {"capacity", 32.0}, {"load", 0.25},     {"host_id", "h1"}};
}

TEST(PeerJsonFuzz, ControlPlaneNodeValuesNeverThrow) {
  auto node_info = [](const std::string& b) { return ctrl::NodeInfo::from_json(b); };
  // The router's decoder on top: a value it cannot use is skipped (an error), never a crash.
  auto spec = [](const std::string& b) -> Result<router::NodeSpec> {
    auto s = router::node_spec_from_ctrl(b);
    if (!s.ok() && s.status().code() != StatusCode::kInvalidArgument) return invalid_argument(s.status().message());
    return s;
  };
  ASSERT_TRUE(node_info(good_node().dump()).ok());
  ASSERT_TRUE(router::node_spec_from_ctrl(good_node().dump()).ok());
  json bad = good_node();
  bad["capacity"] = "lots";
  EXPECT_EQ(ctrl::NodeInfo::from_json(bad.dump()).status().code(), StatusCode::kInvalidArgument);
  bad = good_node();
  bad["capacity"] = -5;
  EXPECT_FALSE(router::node_spec_from_ctrl(bad.dump()).ok());
  every_field_every_value(good_node(), node_info);
  every_field_every_value(good_node(), spec);
  random_mutations(good_node(), node_info, 11, 2000);
  random_mutations(good_node(), spec, 12, 2000);
}

TEST(PeerJsonFuzz, ControlPlaneStoreAnswersNeverThrow) {
  const json kv = {{"key", "/tessera/nodes/n1"}, {"value", "{}"}, {"mod_revision", 7}, {"lease", 3}};
  auto kv_parse = [](const std::string& b) -> Result<ctrl::KeyValue> {
    json j = json::parse(b, nullptr, false);
    return ctrl::kv_from_json(j);  // a discarded parse is not an object: InvalidArgument
  };
  auto event_parse = [](const std::string& b) -> Result<ctrl::WatchEvent> {
    return ctrl::event_from_json(json::parse(b, nullptr, false));
  };
  ASSERT_TRUE(kv_parse(kv.dump()).ok());
  json ev = kv;
  ev["type"] = "delete";
  auto e = event_parse(ev.dump());
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->type, ctrl::WatchEvent::Type::kDelete);
  ev["type"] = "explode";
  EXPECT_FALSE(event_parse(ev.dump()).ok());
  json neg = kv;
  neg["lease"] = -1;
  EXPECT_FALSE(kv_parse(neg.dump()).ok());
  every_field_every_value(kv, kv_parse);
  ev["type"] = "put";
  every_field_every_value(ev, event_parse);
  random_mutations(kv, kv_parse, 13, 2000);
  random_mutations(ev, event_parse, 14, 2000);
}

// The link runtime's entries in the control plane (/tessera/agents/, /tessera/regions/) and the descriptions
// inside prefill requests: KEY=VALUE text, decoded by AgentInfo::decode and RegionDesc::decode.
TEST(PeerJsonFuzz, AgentAndRegionDescriptionsNeverThrow) {
  const std::string agent = "name=d1 host=h1 shm=/tmp/x.sock tcp=127.0.0.1:4711";
  const std::string region = "agent=d1 id=3 length=4096 kind=host shm=- ucx.addr=7f00 ucx.rkey=abcd";
  ASSERT_TRUE(link::AgentInfo::decode(agent).ok());
  ASSERT_TRUE(link::RegionDesc::decode(region).ok());
  for (const char* bad : {"agent=d1 id=-1 length=1 kind=host shm=-",
                          "agent=d1 id=1 length=99999999999999999999999 "
                          "kind=host shm=-",
                          "agent=d1 id=x length=1 kind=host shm=-", "agent=d1 id=1 length=1 kind=gpu shm=-"}) {
    EXPECT_FALSE(link::RegionDesc::decode(bad).ok()) << bad;
  }
  auto agent_parse = [](const std::string& b) -> Result<link::AgentInfo> {
    auto r = link::AgentInfo::decode(b);
    if (!r.ok()) return r.status();
    return r;
  };
  auto region_parse = [](const std::string& b) -> Result<link::RegionDesc> { return link::RegionDesc::decode(b); };
  std::mt19937_64 rng(15);
  const std::string alphabet = "=  -0123456789abcdefxyz/.:\n\t";
  for (int i = 0; i < 4000; ++i) {
    std::string a = agent, r = region;
    for (std::string* s : {&a, &r}) {
      const int edits = 1 + static_cast<int>(rng() % 5);
      for (int e = 0; e < edits && !s->empty(); ++e) {
        const size_t at = rng() % s->size();
        if (rng() % 3 == 0) {
          s->resize(at);
        } else {
          (*s)[at] = rng() % 4 == 0 ? static_cast<char>(rng()) : alphabet[rng() % alphabet.size()];
        }
      }
    }
    expect_clean(agent_parse, a);
    expect_clean(region_parse, r);
  }
}

TEST(JsonFields, RangesAndTypesAreChecked) {
  json j = {{"i", 5}, {"u", 18446744073709551615ull}, {"f", 2.5}, {"s", "abc"}, {"b", true}, {"n", -3}};
  JsonFields f(j, "t");
  EXPECT_EQ(f.integer("i", 0, 10), 5);
  EXPECT_EQ(f.uint("u"), 18446744073709551615ull);
  EXPECT_DOUBLE_EQ(f.number("f", 0, 3), 2.5);
  EXPECT_EQ(f.string("s", 3), "abc");
  EXPECT_TRUE(f.boolean("b"));
  EXPECT_EQ(f.integer("missing", 0, 10, 4), 4);
  EXPECT_TRUE(f.ok()) << f.status().message();
  JsonFields g(j, "t");
  (void)g.uint("n");  // negative is refused, not wrapped
  EXPECT_FALSE(g.ok());
  JsonFields h(j, "t");
  (void)h.integer("u");  // above INT64_MAX
  EXPECT_FALSE(h.ok());
  JsonFields k(j, "t");
  (void)k.string("s", 2);  // too long
  EXPECT_FALSE(k.ok());
  JsonFields l(j, "t");
  (void)l.integer("f");  // a fraction is not an integer
  EXPECT_FALSE(l.ok());
  JsonFields m(json::array(), "t");
  EXPECT_FALSE(m.ok());
}

}  // namespace
}  // namespace tessera
