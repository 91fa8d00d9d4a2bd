// Exact prefix routing from the nodes' own KV events: two real `tessera serve` nodes (stories260K) behind
// `tessera route --strategy kv_aware`. A prompt (as token ids) is computed on one node directly, behind the router's
// back; the router's index learns of its blocks from that node's /internal/kv/events, and the same prompt sent
// through the router goes to the node that holds it. The control: with --no-kv-events the router knows nothing of
// those blocks and sends the prompt to the first node (every cost equal), so the check can fail.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

#include "http/http.h"
#include "router/strategy.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using testing::BackgroundProcess;
using testing::tessera_bin;

using Proc = testing::TesseraServer;
Proc start(std::vector<std::string> args) { return testing::start_tessera(std::move(args)); }

std::vector<int32_t> prompt_ids(int first, int n) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(1 + (first + i * 7) % 500);
  return ids;
}

http::Response complete(const std::string& url, const std::vector<int32_t>& ids) {
  http::ClientRequest r;
  r.method = "POST";
  r.url = url + "/v1/completions";
  r.headers["content-type"] = "application/json";
  r.body = json{{"model", "stories260K"}, {"prompt", ids}, {"max_tokens", 2}, {"temperature", 0}}.dump();
  r.timeout_ms = 60000;
  auto res = http::fetch(r);
  EXPECT_TRUE(res.ok()) << res.status().to_string();
  return res.ok() ? *res : http::Response{};
}

json get(const std::string& url) {
  auto r = http::fetch({.url = url, .timeout_ms = 5000});
  if (!r.ok() || r->status != 200) return nullptr;
  return json::parse(r->body, nullptr, false);
}

// Until the router's index holds at least `blocks` blocks of the node at `url` (its KV events were read).
bool wait_indexed(const std::string& router, const std::string& url, int64_t blocks) {
  for (int i = 0; i < 200; ++i) {
    const json nodes = get(router + "/admin/nodes");
    if (nodes.is_object()) {
      for (const json& n : nodes["nodes"]) {
        // Its model list read too: while one node's list is known and another's is not, requests for the model go
        // only to the known one (serving_model), whatever the KV events say.
        if (n["url"] == url && n.contains("kv_event_blocks") &&
            n["kv_event_blocks"]["device"].get<int64_t>() >= blocks && n["in_rotation"] == true &&
            n.contains("models") && !n["models"].empty())
          return true;
      }
    }
    std::this_thread::sleep_for(25ms);
  }
  return false;
}

TEST(KvEventsRouting, APromptGoesToTheNodeWhoseKvEventsSayItHoldsIt) {
  TS_REQUIRE_STORIES260K();
  Proc a = start({"serve", "--model", testing::stories260k_dir(), "--port", "0"});
  Proc b = start({"serve", "--model", testing::stories260k_dir(), "--port", "0"});
  // The first node by URL is the one every tie goes to; the prompt is computed on the other.
  const std::string first = std::min(a.url, b.url), other = std::max(a.url, b.url);
  const std::string nodes = a.url + "," + b.url;

  // The node publishes its prefix cache: 4 whole blocks of a 70-token prompt, with the router's own hashes.
  const std::vector<int32_t> p1 = prompt_ids(3, 70);
  ASSERT_EQ(complete(other, p1).status, 200);
  const json events = get(other + "/internal/kv/events");
  ASSERT_TRUE(events.is_object());
  EXPECT_EQ(events["reset"], true);
  EXPECT_EQ(events["block_tokens"], 16);
  const std::vector<uint64_t> chain = router::block_chain(p1, 16);
  ASSERT_EQ(chain.size(), 4u);
  const std::vector<uint64_t> held = events["held"]["device"].get<std::vector<uint64_t>>();
  for (uint64_t h : chain) EXPECT_NE(std::find(held.begin(), held.end(), h), held.end()) << "block " << h;

  // Generous probes: on a loaded machine a slow /health must not take a node out of rotation mid-test (the request
  // would then go to the other node for a reason that is not the one checked here).
  const std::vector<std::string> patient = {"--probe-timeout-ms", "5000", "--unhealthy-threshold", "10"};
  std::vector<std::string> route = {"route", "--port", "0", "--nodes", nodes, "--strategy", "kv_aware"};
  route.insert(route.end(), patient.begin(), patient.end());
  Proc router = start(route);
  ASSERT_TRUE(wait_indexed(router.url, other, 4)) << "the router never read " << other << "'s KV events";
  auto r = complete(router.url, p1);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers["x-tessera-node"], other) << "the node holding the prompt's blocks";

  // A second prompt computed on the first node goes there too (both directions).
  const std::vector<int32_t> p2 = prompt_ids(11, 70);
  ASSERT_EQ(complete(first, p2).status, 200);
  ASSERT_TRUE(wait_indexed(router.url, first, 4));
  EXPECT_EQ(complete(router.url, p2).headers["x-tessera-node"], first);

  // The control: without KV events the router has no idea, and the tie goes to the first node.
  route.push_back("--no-kv-events");
  Proc blind = start(route);
  const std::vector<int32_t> p3 = prompt_ids(29, 70);
  ASSERT_EQ(complete(other, p3).status, 200);
  for (int i = 0; i < 200; ++i) {
    const json n = get(blind.url + "/admin/nodes");
    if (n.is_object() && n["nodes"].size() == 2 && n["nodes"][0]["in_rotation"] == true &&
        n["nodes"][1]["in_rotation"] == true)
      break;
    std::this_thread::sleep_for(25ms);
  }
  EXPECT_EQ(complete(blind.url, p3).headers["x-tessera-node"], first) << "without events: the tie-breaker";
  EXPECT_EQ(get(blind.url + "/admin/nodes")["nodes"][0].count("kv_event_blocks"), 0u);
}

// The host tier's events: a prompt whose blocks the small device cache evicted to host memory is still this node's to
// serve (loaded, not computed), and the router sends it there; without events the tie goes elsewhere.
TEST(KvEventsRouting, BlocksMovedToTheHostTierStillDrawThePrompt) {
  TS_REQUIRE_STORIES260K();
  // About 20 device blocks of 16 positions, a megabyte of host memory for what they evict.
  const std::vector<std::string> tiers = {
      "serve",       "--model", testing::stories260k_dir(), "--port", "0", "--max-model-len", "256",
      "--kv-memory", "0.2",     "--kv-host-memory",         "1"};
  Proc a = start(tiers), b = start(tiers);
  const std::string first = std::min(a.url, b.url), other = std::max(a.url, b.url);
  const std::vector<int32_t> p1 = prompt_ids(5, 70);
  ASSERT_EQ(complete(other, p1).status, 200);
  for (int i = 0; i < 8; ++i) ASSERT_EQ(complete(other, prompt_ids(100 + 37 * i, 70)).status, 200);  // p1 pushed out
  const json events = get(other + "/internal/kv/events");
  ASSERT_TRUE(events.is_object());
  const auto device = events["held"]["device"].get<std::vector<uint64_t>>();
  const auto host = events["held"]["host"].get<std::vector<uint64_t>>();
  const std::vector<uint64_t> chain = router::block_chain(p1, 16);
  for (uint64_t h : chain) {
    EXPECT_EQ(std::find(device.begin(), device.end(), h), device.end()) << "evicted from the device cache";
    EXPECT_NE(std::find(host.begin(), host.end(), h), host.end()) << "kept in host memory";
  }
  const std::vector<std::string> patient = {"--probe-timeout-ms", "5000", "--unhealthy-threshold", "10"};
  std::vector<std::string> route = {"route", "--port", "0", "--nodes", a.url + "," + b.url, "--strategy", "kv_aware"};
  route.insert(route.end(), patient.begin(), patient.end());
  Proc router = start(route);
  bool indexed = false;
  for (int i = 0; i < 200 && !indexed; ++i) {
    const json nodes = get(router.url + "/admin/nodes");
    for (const json& n : nodes.is_object() ? nodes["nodes"] : json::array()) {
      indexed |= n["url"] == other && n.contains("kv_event_blocks") && n["kv_event_blocks"]["host"] >= 4 &&
                 n["in_rotation"] == true;
    }
    if (!indexed) std::this_thread::sleep_for(25ms);
  }
  ASSERT_TRUE(indexed) << "the router never read the host tier's events";
  EXPECT_EQ(complete(router.url, p1).headers["x-tessera-node"], other);
  route.push_back("--no-kv-events");
  Proc blind = start(route);
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(complete(blind.url, p1).headers["x-tessera-node"], first) << "without events: the tie-breaker";
}

// A hybrid model (Qwen3.5's pattern at test size): a node can use a prefix only up to a block after which it holds
// the recurrent state, and its events say which those are. The tie-breaking node computed a longer prompt and then
// gave its one state checkpoint to another prompt: it holds six blocks of the prompt and no state after any of
// them. The other node computed the prompt's first four blocks and holds the state after them. Counting blocks
// alone, the router would send the prompt to the first (six blocks against four, an equal load); it goes to the
// node that can use what it holds.
TEST(KvEventsRouting, AHybridPromptGoesToTheNodeHoldingAStateNotTheMostBlocks) {
  const std::string model =
      testing::synth_small_gguf(testing::scratch_dir() + "/q35.gguf", "qwen3.5-0.8b", 4, {"--decisive"});
  ASSERT_FALSE(model.empty());
  auto node = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"serve",       "--model",        model, "--port", "0", "--served-model-name",
                                     "stories260K", "--max-num-seqs", "4"};
    args.insert(args.end(), extra.begin(), extra.end());
    return start(args);
  };
  Proc a = node({"--state-checkpoints", "1"}), b = node({"--state-checkpoints", "1"});
  const std::string first = std::min(a.url, b.url), other = std::max(a.url, b.url);
  const std::vector<int32_t> longer = prompt_ids(3, 102), prompt(longer.begin(), longer.begin() + 70);
  const std::vector<uint64_t> chain = router::block_chain(longer, 16);
  ASSERT_EQ(complete(first, longer).status, 200);
  ASSERT_EQ(complete(first, prompt_ids(200, 40)).status, 200);  // takes first's one checkpoint
  ASSERT_EQ(complete(other, prompt).status, 200);               // its checkpoint after block 4 (position 64)
  const json fe = get(first + "/internal/kv/events"), oe = get(other + "/internal/kv/events");
  ASSERT_TRUE(fe.is_object() && oe.is_object());
  EXPECT_EQ(fe["states"], true);
  const auto first_blocks = fe["held"]["device"].get<std::vector<uint64_t>>();
  const auto first_states = fe["held_states"]["device"].get<std::vector<uint64_t>>();
  const auto other_states = oe["held_states"]["device"].get<std::vector<uint64_t>>();
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_NE(std::find(first_blocks.begin(), first_blocks.end(), chain[i]), first_blocks.end()) << "block " << i;
    EXPECT_EQ(std::find(first_states.begin(), first_states.end(), chain[i]), first_states.end()) << "state " << i;
  }
  EXPECT_NE(std::find(other_states.begin(), other_states.end(), chain[3]), other_states.end());

  const std::vector<std::string> route = {"route",
                                          "--port",
                                          "0",
                                          "--nodes",
                                          a.url + "," + b.url,
                                          "--strategy",
                                          "kv_aware",
                                          "--probe-timeout-ms",
                                          "5000",
                                          "--unhealthy-threshold",
                                          "10"};
  Proc router = start(route);
  ASSERT_TRUE(wait_indexed(router.url, first, 6));
  ASSERT_TRUE(wait_indexed(router.url, other, 4));
  for (const json& n : get(router.url + "/admin/nodes")["nodes"]) {  // what the router knows of each node's states
    ASSERT_TRUE(n.contains("kv_event_states")) << n.dump();
    EXPECT_EQ(n["kv_event_states"]["device"], 1) << "one checkpoint each: " << n.dump();
  }
  auto r = complete(router.url, longer);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers["x-tessera-node"], other) << "the node with the state after the prompt's first 64 positions";
  const json usage = json::parse(r.body, nullptr, false)["usage"];
  EXPECT_EQ(usage["prompt_tokens_details"]["cached_tokens"], 64) << usage.dump();
}

}  // namespace
}  // namespace tessera
