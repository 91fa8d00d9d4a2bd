// The cpu backend as a user reaches it: `tessera generate --backend cpu`, checked against llama2.c's
// published greedy output, with its options and their bad values.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "http/http.h"
#include "support/paths.h"
#include "support/process.h"

namespace tessera {
namespace {

using testing::run_process;
using testing::tessera_bin;

TEST(CpuBackend, ReproducesLlama2cGreedyOutputByteForByte) {
  TS_REQUIRE_STORIES260K();
  auto want = read_file(testing::stories260k_dir() + "/greedy-256.txt");
  ASSERT_TRUE(want.ok());
  // f32 weights with an f32 cache are what llama2.c computes; the default cache is f16 (half the bytes
  // attention reads), which still gives this model's reference text.
  for (const char* kv : {"f32", "f16"}) {
    for (const char* threads : {"1", "2"}) {
      auto r = run_process({tessera_bin(), "generate", "--model", testing::stories260k_dir(), "--temperature", "0",
                            "--max-tokens", "256", "--backend", "cpu", "--threads", threads, "--kv-dtype", kv});
      ASSERT_EQ(r.exit_code, 0) << r.err;
      EXPECT_EQ(r.out, *want) << "threads " << threads << " kv " << kv;
      EXPECT_NE(r.err.find("on cpu"), std::string::npos) << r.err;
    }
  }
  auto b = run_process({tessera_bin(), "bench", "generate", "--model", testing::stories260k_dir(), "--backend", "cpu",
                        "--prompt-tokens", "4", "--gen-tokens", "4", "--repeat", "1", "--no-ceilings"});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_NE((b.out + b.err).find("kv f16"), std::string::npos) << "the default cache type: " << b.out << b.err;
}

// Every kernel variant the processor runs gives llama2.c's greedy text; forcing one it cannot run, or naming
// one that does not exist, is a one-line error. `bench generate` names the variant in use.
TEST(CpuBackend, EveryKernelVariantReproducesTheGreedyOutput) {
  TS_REQUIRE_STORIES260K();
  auto want = read_file(testing::stories260k_dir() + "/greedy-256.txt");
  ASSERT_TRUE(want.ok());
  int ran = 0;
  for (const char* isa : {"amx", "avx512", "avx2", "generic", "amx-emulated"}) {
    auto r = run_process({tessera_bin(), "generate", "--cpu-isa", isa, "--model", testing::stories260k_dir(),
                          "--temperature", "0", "--max-tokens", "256", "--backend", "cpu", "--threads", "2",
                          "--kv-dtype", "f32"});
    if (r.exit_code != 0 && r.err.find("this processor cannot run those kernels") != std::string::npos) {
      std::printf("[ cpu ] %s kernels not runnable here: %s", isa, r.err.c_str());
      continue;
    }
    ASSERT_EQ(r.exit_code, 0) << isa << ": " << r.err;
    EXPECT_EQ(r.out, *want) << isa;
    ++ran;
  }
  EXPECT_GE(ran, 1);  // generic runs everywhere
  auto bad = run_process({tessera_bin(), "generate", "--cpu-isa", "sse9", "--model", testing::stories260k_dir()});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("unknown cpu kernel variant 'sse9' (auto, amx, avx512, avx2, generic or amx-emulated)"),
            std::string::npos)
      << bad.err;
  auto b = run_process({tessera_bin(), "bench", "generate", "--cpu-isa", "generic", "--model",
                        testing::stories260k_dir(), "--backend", "cpu", "--prompt-tokens", "4", "--gen-tokens", "4"});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_NE((b.out + b.err).find("generic kernels"), std::string::npos) << b.out << b.err;
}

TEST(OpenClBackend, ReproducesLlama2cGreedyOutputByteForByte) {
  TS_REQUIRE_STORIES260K();
  auto want = read_file(testing::stories260k_dir() + "/greedy-256.txt");
  ASSERT_TRUE(want.ok());
  auto r = run_process({tessera_bin(), "generate", "--model", testing::stories260k_dir(), "--temperature", "0",
                        "--max-tokens", "256", "--backend", "opencl"},
                       180);
  if (r.exit_code != 0 &&
      (r.err.find("unknown backend") != std::string::npos || r.err.find("no OpenCL") != std::string::npos)) {
    GTEST_SKIP() << "opencl not available here: " << r.err;
  }
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, *want);
  {
    const char* dtypes = "f16";
    auto h = run_process(
        {tessera_bin(), "generate", "--model", testing::stories260k_dir(), "--temperature", "0", "--max-tokens", "64",
         "--backend", "opencl", "--weight-dtype", dtypes, "--kv-dtype", dtypes, "--quiet"},
        180);
    ASSERT_EQ(h.exit_code, 0) << h.err;
    EXPECT_GT(h.out.size(), 20u);
  }
}

TEST(CpuBackend, GraphReplayReproducesTheSameText) {
  TS_REQUIRE_STORIES260K();
  auto want = read_file(testing::stories260k_dir() + "/greedy-256.txt");
  ASSERT_TRUE(want.ok());
  auto r = run_process({tessera_bin(), "generate", "--model", testing::stories260k_dir(), "--temperature", "0",
                        "--max-tokens", "256", "--backend", "cpu", "--graph", "on", "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, *want);
}

TEST(CpuBackend, QuantisedWeightsAndF16CacheGenerateText) {
  TS_REQUIRE_STORIES260K();
  for (const char* dtype : {"f16", "bf16", "q8_0", "q4_0"}) {
    auto r = run_process({tessera_bin(), "generate", "--model", testing::stories260k_dir(), "--temperature", "0",
                          "--max-tokens", "32", "--backend", "cpu", "--weight-dtype", dtype, "--kv-dtype", "f16",
                          "--quiet"});
    ASSERT_EQ(r.exit_code, 0) << dtype << ": " << r.err;
    EXPECT_GT(r.out.size(), 20u) << dtype;
  }
}

TEST(CpuBackend, BadOptionsAreErrorsThatSayWhatIsAllowed) {
  TS_REQUIRE_STORIES260K();
  auto dtype = run_process(
      {tessera_bin(), "generate", "--model", testing::stories260k_dir(), "--backend", "cpu", "--weight-dtype", "q2_k"});
  EXPECT_NE(dtype.exit_code, 0);
  EXPECT_NE(dtype.err.find("q4_0"), std::string::npos) << dtype.err;
  auto threads = run_process(
      {tessera_bin(), "generate", "--model", testing::stories260k_dir(), "--backend", "cpu", "--threads", "-3"});
  EXPECT_NE(threads.exit_code, 0);
  auto backend = run_process({tessera_bin(), "generate", "--model", testing::stories260k_dir(), "--backend", "tpu"});
  EXPECT_NE(backend.exit_code, 0);
  EXPECT_NE(backend.err.find("cpu"), std::string::npos) << backend.err;
  EXPECT_NE(backend.err.find("ref"), std::string::npos) << backend.err;
}

// The chosen tokens and their logprobs of a greedy completion of `ids` on a node serving `model` with `flags`.
std::pair<std::vector<std::string>, std::vector<double>> greedy_logprobs(const std::string& model,
                                                                         const std::vector<std::string>& flags,
                                                                         const std::vector<int>& ids) {
  std::vector<std::string> args = {"serve", "--model",         model, "--port",
                                   "0",     "--backend",       "cpu", "--served-model-name",
                                   "m",     "--max-model-len", "2048"};
  args.insert(args.end(), flags.begin(), flags.end());
  testing::TesseraServer node = testing::start_tessera(args);
  http::ClientRequest r;
  r.method = "POST";
  r.url = node.url + "/v1/completions";
  r.headers["content-type"] = "application/json";
  r.body = nlohmann::json{{"model", "m"},     {"prompt", ids}, {"max_tokens", 16},
                          {"temperature", 0}, {"logprobs", 1}, {"ignore_eos", true}}
               .dump();
  r.timeout_ms = 120000;
  auto res = http::fetch(r);
  EXPECT_TRUE(res.ok() && res->status == 200) << (res.ok() ? res->body : res.status().to_string());
  EXPECT_EQ(node.p->stop(SIGTERM), 0);
  if (!res.ok() || res->status != 200) return {};
  const nlohmann::json lp = nlohmann::json::parse(res->body)["choices"][0]["logprobs"];
  return {lp["tokens"].get<std::vector<std::string>>(), lp["token_logprobs"].get<std::vector<double>>()};
}

// A reply does not depend on --threads: one and two threads give the same tokens with the same logprob bits, on
// k-quant and q8_0 weights (repacked panels, chunked over the threads) and a hybrid model's delta rule, with a
// prompt past one key block of decode attention. The check can fail: the generic kernels, another arithmetic, give
// other bits.
TEST(CpuBackend, TheThreadCountDoesNotChangeALogprobsBits) {
  const std::string dir = testing::scratch_dir();
  std::vector<int> ids;
  for (int i = 0; i < 700; ++i) ids.push_back(1 + (i * 37) % 400);
  struct Case {
    std::string shape, dtype, dim, layers;
  };
  // Test-size shapes (--small: a 512-token vocabulary), 256 wide; Qwen3.5's four layers are linear and full attention
  // in turn.
  for (const Case& c : {Case{"llama3.2-1b", "q4_k", "256", "2"}, Case{"qwen3.5-0.8b", "q8_0", "256", "4"}}) {
    SCOPED_TRACE(c.shape + " " + c.dtype);
    const std::string model = dir + "/" + c.shape + "-" + c.dtype + ".gguf";
    auto synth = run_process(
        {tessera_bin(), "synth",        "--shape", c.shape,         "--small", "--layers", c.layers, "--dim",
         c.dim,         "--hidden-dim", "512",     "--max-seq-len", "2048",    "--format", "gguf",   "--dtype",
         c.dtype,       "--seed",       "3",       "--out",         model},
        300.0);
    ASSERT_EQ(synth.exit_code, 0) << synth.err;
    const auto one = greedy_logprobs(model, {"--threads", "1"}, ids);
    const auto two = greedy_logprobs(model, {"--threads", "2"}, ids);
    ASSERT_EQ(one.first.size(), 16u);
    EXPECT_EQ(two.first, one.first);
    EXPECT_EQ(two.second, one.second) << "bit for bit";
    if (c.dtype == "q8_0") {
      const auto generic = greedy_logprobs(model, {"--threads", "1", "--cpu-isa", "generic"}, ids);
      EXPECT_NE(generic.second, one.second) << "another arithmetic, other bits: the comparison can fail";
    }
  }
}

// Two turns of one conversation on a node serving `model` with `flags`: the greedy reply (40 tokens) to `ids`, then
// the logprobs of the greedy reply (16 tokens) to `ids`, that reply and 20 more ids, with how many of the second
// prompt's positions came from the prefix cache.
struct SecondTurn {
  std::vector<double> logprobs;
  int cached = -1;
};
SecondTurn second_turn(const std::string& model, const std::vector<std::string>& flags, std::vector<int> ids) {
  std::vector<std::string> args = {"serve", "--model",         model, "--port",
                                   "0",     "--backend",       "cpu", "--served-model-name",
                                   "m",     "--max-model-len", "2048"};
  args.insert(args.end(), flags.begin(), flags.end());
  testing::TesseraServer node = testing::start_tessera(args);
  auto complete = [&](const std::vector<int>& prompt, int max_tokens) -> nlohmann::json {
    http::ClientRequest r;
    r.method = "POST";
    r.url = node.url + "/v1/completions";
    r.headers["content-type"] = "application/json";
    r.body = nlohmann::json{{"model", "m"},  {"prompt", prompt},   {"max_tokens", max_tokens}, {"temperature", 0},
                            {"logprobs", 1}, {"ignore_eos", true}, {"return_token_ids", true}}
                 .dump();
    r.timeout_ms = 120000;
    auto res = http::fetch(r);
    EXPECT_TRUE(res.ok() && res->status == 200) << (res.ok() ? res->body : res.status().to_string());
    if (!res.ok() || res->status != 200) return nlohmann::json();
    return nlohmann::json::parse(res->body);
  };
  SecondTurn out;
  const nlohmann::json first = complete(ids, 40);
  if (!first.is_null()) {
    for (int id : first["choices"][0]["token_ids"].get<std::vector<int>>()) ids.push_back(id);
    for (int i = 0; i < 20; ++i) ids.push_back(5 + (i * 53) % 400);
    const nlohmann::json second = complete(ids, 16);
    if (!second.is_null()) {
      out.logprobs = second["choices"][0]["logprobs"]["token_logprobs"].get<std::vector<double>>();
      out.cached = second["usage"]["prompt_tokens_details"].value("cached_tokens", -1);
    }
  }
  EXPECT_EQ(node.p->stop(SIGTERM), 0);
  return out;
}

// `tessera serve --deterministic`: a second turn that takes the first turn's reply blocks (filled by decode) from the
// prefix cache gets the bits of a node without a prefix cache. Without the flag the same comparison differs on the
// vector kernels (prefill and decode attention sum in other orders), so the check can fail; on a processor with
// only the generic kernels that control is not run (they agree to the bit there anyway).
TEST(CpuBackend, DeterministicRepliesDoNotDependOnThePrefixCache) {
  const std::string dir = testing::scratch_dir();
  const std::string model = dir + "/deterministic-llama-q4_k.gguf";
  // Heads of 64 (the vector kernels' decode paths; the test size's heads of 32 take the generic ones), 256 wide, 4
  // layers (with 2 the rounding did not reach the logprobs' bits here, and the control below failed).
  const std::vector<std::string> synth_args = {
      tessera_bin(),   "synth", "--shape",  "llama3.2-1b", "--layers", "4",    "--dim",  "256", "--hidden-dim", "512",
      "--max-seq-len", "2048",  "--format", "gguf",        "--dtype",  "q4_k", "--seed", "3",   "--out",        model};
  auto synth = run_process(synth_args, 300.0);
  ASSERT_EQ(synth.exit_code, 0) << synth.err;
  std::vector<int> ids;
  for (int i = 0; i < 700; ++i) ids.push_back(1 + (i * 37) % 400);
  const SecondTurn cached = second_turn(model, {"--deterministic"}, ids);
  const SecondTurn whole = second_turn(model, {"--deterministic", "--no-prefix-cache"}, ids);
  ASSERT_EQ(cached.logprobs.size(), 16u);
  EXPECT_GE(cached.cached, 736) << "the first reply's blocks were not taken from the cache";
  EXPECT_EQ(whole.cached, 0);
  EXPECT_EQ(cached.logprobs, whole.logprobs) << "bit for bit";
  const auto cpuinfo = read_file("/proc/cpuinfo");
  if (!cpuinfo.ok() || cpuinfo->find(" avx2") == std::string::npos) return;
  const SecondTurn plain_cached = second_turn(model, {}, ids);
  const SecondTurn plain_whole = second_turn(model, {"--no-prefix-cache"}, ids);
  EXPECT_GE(plain_cached.cached, 736);
  EXPECT_NE(plain_cached.logprobs, plain_whole.logprobs) << "without --deterministic the reused blocks round otherwise";
}

}  // namespace
}  // namespace tessera
