// `tessera serve --model X.gguf` with no other flag (issue 17 item 4): a 32k-context model starts with the
// default KV budget on the fastest backend here (--backend auto), serving the context that budget holds with
// a warning, and says which backend on its startup log and on /health.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "http/http.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera {
namespace {

using json = nlohmann::json;
using testing::run_process;
using testing::tessera_bin;

TEST(ServeDefaults, A32kContextModelStartsWithNoFlagsOnTheAutoBackend) {
  const std::string dir = testing::scratch_dir();
  const std::string model = dir + "/q.gguf";
  // qwen3's family at 32768 positions, wide enough in KV that the default 1024 MiB budget does not hold the
  // whole context: 10 layers x K and V x 32 kv heads x 32 x 2 bytes (the default f16 cache) = 40 KiB per token,
  // so 26214 tokens fit.
  // (The qwen2.5-0.5b shape itself needs 24 KiB per token at 24 layers and fits its 32768 in 768 MiB.)
  auto s =
      run_process({tessera_bin(), "synth", "--shape", "qwen3-0.6b", "--small", "--dim", "2048", "--hidden-dim", "128",
                   "--layers", "10", "--max-seq-len", "32768", "--format", "gguf", "--dtype", "q8_0", "--out", model},
                  300.0);
  ASSERT_EQ(s.exit_code, 0) << s.err;

  // The startup log: the backend chosen and why, the shortened context.
  auto r = run_process({tessera_bin(), "serve", "--model", model, "--port", "0"}, 20.0);
  EXPECT_TRUE(r.timed_out) << "serve exited: " << r.err;
  EXPECT_NE(r.out.find("listening on"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.err.find("backend auto: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("less than the model's context of 32768; serving a context of 26208"), std::string::npos)
      << r.err;

  // A served request, /health and /v1/models say the same.
  testing::BackgroundProcess serve({tessera_bin(), "serve", "--model", model, "--port", "0"});
  const int port = testing::port_from_line(serve.wait_for_line("listening on", 60.0));
  ASSERT_GT(port, 0);
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  auto health = http::fetch({.url = url + "/health", .timeout_ms = 10000});
  ASSERT_TRUE(health.ok()) << health.status().to_string();
  const json h = json::parse(health->body, nullptr, false);
  ASSERT_TRUE(h.is_object()) << health->body;
  // This host has no GPU for cuda, and its OpenCL device (if any) is PoCL on the CPU: the cpu backend, which
  // has q8_0 kernels, is the fastest here. On a host with a usable GPU the choice would be cuda.
  const std::string backend = h.value("backend", "");
  EXPECT_TRUE(backend == "cpu" || backend == "cuda") << health->body;
  EXPECT_NE(r.err.find("backend auto: " + backend), std::string::npos) << r.err;
  auto models = http::fetch({.url = url + "/v1/models", .timeout_ms = 10000});
  ASSERT_TRUE(models.ok());
  const json m = json::parse(models->body, nullptr, false);
  EXPECT_EQ(m["data"][0].value("max_model_len", 0), 26208) << models->body;
  auto c = http::fetch({.method = "POST",
                        .url = url + "/v1/completions",
                        .headers = {{"Content-Type", "application/json"}},
                        .body = R"({"model":"q","prompt":[5,6,7],"max_tokens":4,"temperature":0})",
                        .timeout_ms = 60000});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->status, 200) << c->body;
}

}  // namespace
}  // namespace tessera
