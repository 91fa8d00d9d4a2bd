// A rogue prefill node (issue 20, item 3): a decode node asked a "prefill node" that answers 200 with bodies
// of the wrong shape (a string first_token or checksum, missing, negative or huge values, not JSON at all).
// Before the fix one such reply aborted the decode node through an uncaught exception on a detached thread.
// Now each request must still be answered, with the same greedy text as a node prefilling locally, and the
// decode node must stay up and count every such request as a fallback.
#include <gtest/gtest.h>

#include <atomic>
#include <csignal>

#include <nlohmann/json.hpp>

#include "http/http.h"
#include "support/node_http.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera {
namespace {

using json = nlohmann::json;
using testing::BackgroundProcess;
using testing::tessera_bin;

const std::vector<std::string> kBadReplies = {
    R"({"first_token":"12","checksum":1})",
    R"({"first_token":12,"checksum":"1"})",
    R"({"first_token":12})",
    R"({"first_token":-1,"checksum":1})",
    R"({"first_token":1e300,"checksum":1})",
    R"({"first_token":99999999,"checksum":1})",
    R"({"first_token":1,"checksum":-5})",
    R"({"first_token":1,"checksum":1,"bytes":1099511627776})",
    R"({"first_token":1,"checksum":1,"compute_ms":"fast"})",
    R"([1,2,3])",
    R"("just a string")",
    R"(not json at all)",
    R"({"first_token":null,"checksum":null})",
};

TEST(RoguePrefillNode, MalformedRepliesFallBackLocallyAndTheDecodeNodeStaysUp) {
  TS_REQUIRE_STORIES260K();
  std::atomic<size_t> served{0};
  http::ServerOptions so;
  so.host = "127.0.0.1";
  so.port = 0;
  http::Server rogue(so);
  rogue.route("POST", "/internal/pd/prefill", [&](const http::Request&, std::shared_ptr<http::ResponseWriter> w) {
    w->send(200, kBadReplies[served++ % kBadReplies.size()]);
  });
  ASSERT_TRUE(rogue.start().ok());
  const std::string rogue_url = "http://127.0.0.1:" + std::to_string(rogue.port());

  BackgroundProcess decode({tessera_bin(), "serve", "--model", testing::stories260k_dir(), "--port", "0", "--role",
                            "decode", "--prefill-nodes", rogue_url, "--pd-min-tokens", "4"});
  const int port = testing::port_from_line(decode.wait_for_line("listening on"));
  ASSERT_GT(port, 0);
  const std::string url = "http://127.0.0.1:" + std::to_string(port);

  BackgroundProcess local({tessera_bin(), "serve", "--model", testing::stories260k_dir(), "--port", "0"});
  const int local_port = testing::port_from_line(local.wait_for_line("listening on"));
  ASSERT_GT(local_port, 0);
  const std::string local_url = "http://127.0.0.1:" + std::to_string(local_port);

  const std::string prompt = "Once upon a time, there was a little girl named";
  const std::string expected = testing::complete_greedy(local_url, prompt, 8);
  ASSERT_FALSE(expected.empty());
  for (size_t i = 0; i < kBadReplies.size(); ++i) {
    // Distinct from the first token on: a cached prefix would be prefilled locally without asking.
    const std::string p = std::string(1, static_cast<char>('A' + i)) + "nna and Tom " + std::to_string(i) + " went";
    EXPECT_FALSE(testing::complete_greedy(url, p, 8).empty()) << kBadReplies[i];
  }
  EXPECT_EQ(testing::complete_greedy(url, prompt, 8), expected);
  EXPECT_GE(served.load(), kBadReplies.size());
  // Still up, and every remote attempt was a fallback, none a crash.
  EXPECT_EQ(::kill(decode.pid(), 0), 0);
  EXPECT_EQ(testing::scrape_metric(url, "tessera_pd_requests_total{path=\"fallback\"}"),
            static_cast<double>(served.load()));
  rogue.stop(1000);
}

}  // namespace
}  // namespace tessera
