// llama.cpp as a reference peer in tests: where its binaries are, quantizing a GGUF with its own
// `llama-quantize`, and a running `llama-server` to ask for greedy continuations of token-id prompts.
//
// The binaries come from scripts/llamacpp.sh (built into a cache folder, not into this build). The folder is
// TESSERA_LLAMACPP_BIN from the environment when set (scripts/test sets it), else the folder given at configure
// time (-DTESSERA_LLAMACPP_BIN=..., which defaults to where scripts/llamacpp.sh builds). Tests call
// TS_REQUIRE_LLAMACPP() first: without the binaries they skip and say how to get them.
//
// Thread-safety: none needed; each test drives its own processes from one thread.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "support/process.h"

namespace tessera::testing {

// A greedy continuation: the token ids generated and, for each, its log-probability under the engine's full
// distribution (before sampling); from llama-server also the few most likely tokens at each step.
struct Continuation {
  std::vector<int32_t> ids;
  std::vector<double> logprobs;
  std::vector<std::vector<std::pair<int32_t, double>>> top;  // (id, logprob), most likely first
};

// The folder expected to hold llama-server, llama-quantize, llama-bench and llama-tokenize.
std::string llamacpp_bin_dir();
// "" when every binary the parity tests need is there, else what is missing and how to build it.
std::string llamacpp_missing();

// What a wait status says of a peer that ended: "the peer crashed (signal N, NAME): ..." for a signal, else its exit
// status; worded so that a crash of llama.cpp reads apart from a parity failure.
std::string describe_exit(int wait_status);
// The same for a finished run_process(): "the peer crashed (signal N, NAME)", "exit N" or "timed out".
std::string peer_failure(const ProcessResult& r);

// `llama-quantize [extra_args...] in out preset`; returns "" on success, else the tool's output.
std::string llamacpp_quantize(const std::string& in, const std::string& out, const std::string& preset,
                              const std::vector<std::string>& extra_args);

// A `llama-server` on 127.0.0.1 and a port it chose, for one model file, single slot, killed on destruction.
class LlamaServer {
 public:
  LlamaServer(const LlamaServer&) = delete;
  LlamaServer& operator=(const LlamaServer&) = delete;
  ~LlamaServer();
  // Starts it and waits (up to `timeout_seconds`) until /health answers 200. error() says why it did not.
  // `extra_args` go after the usual ones (e.g. {"--embeddings"}).
  LlamaServer(const std::string& model, int context, int threads, double timeout_seconds = 120.0,
              const std::vector<std::string>& extra_args = {});
  bool ready() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  const std::string& url() const { return url_; }
  // The greedy (temperature 0) continuation of `prompt` (token ids, sent as they are: no BOS added), at most
  // `n` tokens, stopping where llama.cpp stops (end of generation). Records a test failure on any error.
  Continuation complete(const std::vector<int32_t>& prompt, int n);
  // "" while the server runs; once it has ended, how ("the peer crashed (signal 11, ...)").
  std::string failure();

 private:
  bool exited();  // reaps the child if it has exited

  int pid_ = -1;
  std::string log_;  // its stdout and stderr
  std::string url_;
  std::string error_;
  std::string crash_;  // how the child ended, once exited() has reaped it
};

}  // namespace tessera::testing

// Skips the current test, saying why, when llama.cpp's binaries are not built.
#define TS_REQUIRE_LLAMACPP()                                                           \
  do {                                                                                  \
    const std::string ts_missing_ = ::tessera::testing::llamacpp_missing();             \
    if (!ts_missing_.empty()) GTEST_SKIP() << "llama.cpp peer absent: " << ts_missing_; \
  } while (0)
