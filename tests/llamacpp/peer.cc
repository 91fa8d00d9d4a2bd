// llama.cpp as a reference peer: locating its binaries, llama-quantize, and a llama-server child process.
//
// llama-server logs a great deal; it writes to a log file (not a pipe nobody reads, which would fill and block
// it), and the log's "listening on http://127.0.0.1:PORT" line gives the port it chose (--port 0).
#include "llamacpp/peer.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "http/http.h"

extern char** environ;

namespace tessera::testing {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const char* const kTools[] = {"llama-server", "llama-quantize"};

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string tail(const std::string& text, size_t lines) {
  size_t at = text.size();
  for (size_t n = 0; n <= lines && at > 0; ++n) {
    at = text.rfind('\n', at - 1);
    if (at == std::string::npos) return text;
  }
  return text.substr(at + 1);
}

}  // namespace

std::string llamacpp_bin_dir() {
  if (const char* e = std::getenv("TESSERA_LLAMACPP_BIN"); e != nullptr && *e != '\0') return e;
  return TESSERA_LLAMACPP_BIN_DEFAULT;
}

std::string llamacpp_missing() {
  const std::string dir = llamacpp_bin_dir();
  for (const char* t : kTools) {
    if (access((dir + "/" + t).c_str(), X_OK) != 0) {
      return "no executable " + dir + "/" + t +
             " (run scripts/llamacpp.sh, then set TESSERA_LLAMACPP_BIN to the folder it prints)";
    }
  }
  return "";
}

std::string llamacpp_quantize(const std::string& in, const std::string& out, const std::string& preset,
                              const std::vector<std::string>& extra_args) {
  std::vector<std::string> argv{llamacpp_bin_dir() + "/llama-quantize"};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  argv.insert(argv.end(), {in, out, preset, "1"});  // the trailing 1: threads, out of two busy cores
  ProcessResult r = run_process(argv, 300.0);
  if (r.exit_code == 0 && !r.timed_out && fs::exists(out)) return "";
  return "llama-quantize " + preset + " failed (" + peer_failure(r) + "): " + tail(r.out + r.err, 15);
}

LlamaServer::LlamaServer(const std::string& model, int context, int threads, double timeout_seconds,
                         const std::vector<std::string>& extra_args) {
  log_ = model + ".llama-server.log";  // beside the model: the test's scratch folder
  std::vector<std::string> argv{llamacpp_bin_dir() + "/llama-server",
                                "-m",
                                model,
                                "--host",
                                "127.0.0.1",
                                "--port",
                                "0",
                                "-c",
                                std::to_string(context),
                                "-np",
                                "1",
                                "-t",
                                std::to_string(threads),
                                "--no-webui"};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    error_ = "cannot start " + argv[0] + ": " + std::strerror(rc);
    return;
  }
  pid_ = pid;

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  // First the port, from the log; then /health, which answers 503 while the model loads.
  while (url_.empty()) {
    const std::string text = read_text(log_);
    if (size_t at = text.find("listening on http://"); at != std::string::npos) {
      const size_t end = text.find_first_of(" \r\n", at + 13);
      if (end != std::string::npos) url_ = text.substr(at + 13, end - at - 13);
    }
    if (url_.empty()) {
      if (exited() || std::chrono::steady_clock::now() > deadline) {
        error_ = (crash_.empty() ? "llama-server did not start listening" : crash_) + " (log " + log_ + "):\n" +
                 tail(read_text(log_), 20);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  for (;;) {
    auto r = http::fetch({.url = url_ + "/health", .timeout_ms = 5000});
    if (r.ok() && r->status == 200) return;
    if (exited() || std::chrono::steady_clock::now() > deadline) {
      error_ = (crash_.empty() ? "llama-server at " + url_ + " never became healthy" : crash_) + " (log " + log_ +
               "):\n" + tail(read_text(log_), 20);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

LlamaServer::~LlamaServer() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
}

std::string LlamaServer::failure() {
  if (!exited()) return "";
  return (crash_.empty() ? std::string("llama-server is not running") : crash_) + " (log " + log_ + "):\n" +
         tail(read_text(log_), 20);
}

bool LlamaServer::exited() {
  if (pid_ <= 0) return true;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    pid_ = -1;
    crash_ = describe_exit(status);
    return true;
  }
  return false;
}

std::string describe_exit(int wait_status) {
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    const char* name = sigdescr_np(sig);
    return "the peer crashed (signal " + std::to_string(sig) + (name != nullptr ? std::string(", ") + name : "") +
           "): llama.cpp itself failed, not a parity difference";
  }
  return "the peer exited with status " + std::to_string(WEXITSTATUS(wait_status)) +
         ": llama.cpp itself failed, not a parity difference";
}

std::string peer_failure(const ProcessResult& r) {
  if (r.timed_out) return "timed out";
  if (r.exit_code > 128) {
    const int sig = r.exit_code - 128;
    const char* name = sigdescr_np(sig);
    return "the peer crashed (signal " + std::to_string(sig) + (name != nullptr ? std::string(", ") + name : "") + ")";
  }
  return "exit " + std::to_string(r.exit_code);
}

Continuation LlamaServer::complete(const std::vector<int32_t>& prompt, int n) {
  // cache_prompt off: every prompt is computed from scratch, as Tessera's side computes it. n_probs 5: each
  // token's log-probability and the 5 best, from the softmax of the raw logits (not post_sampling_probs).
  const json body{{"prompt", prompt},      {"n_predict", n},        {"temperature", 0}, {"n_probs", 5},
                  {"cache_prompt", false}, {"return_tokens", true}, {"stream", false}};
  auto r = http::fetch({.method = "POST",
                        .url = url_ + "/completion",
                        .headers = {{"Content-Type", "application/json"}},
                        .body = body.dump(),
                        .timeout_ms = 120000});
  if (!r.ok()) {
    // A peer that died under the request is llama.cpp's failure, told apart from a parity difference.
    if (exited()) {
      ADD_FAILURE() << "llama-server /completion: " << crash_ << " (log " << log_ << "):\n"
                    << tail(read_text(log_), 20);
    } else {
      ADD_FAILURE() << "llama-server /completion: " << r.status().to_string();
    }
    return {};
  }
  if (r->status != 200) {
    ADD_FAILURE() << "llama-server /completion answered " << r->status << ": " << r->body;
    return {};
  }
  json j = json::parse(r->body, nullptr, false);
  if (!j.is_object() || !j.contains("tokens") || !j["tokens"].is_array() || !j.contains("completion_probabilities") ||
      !j["completion_probabilities"].is_array()) {
    ADD_FAILURE() << "llama-server /completion gave no tokens and probabilities: " << r->body.substr(0, 500);
    return {};
  }
  Continuation c;
  c.ids = j["tokens"].get<std::vector<int32_t>>();
  for (const json& p : j["completion_probabilities"]) {
    c.logprobs.push_back(p.value("logprob", std::nan("")));
    std::vector<std::pair<int32_t, double>> top;
    if (p.contains("top_logprobs") && p["top_logprobs"].is_array()) {
      for (const json& t : p["top_logprobs"]) top.emplace_back(t.value("id", -1), t.value("logprob", std::nan("")));
    }
    c.top.push_back(std::move(top));
  }
  if (c.logprobs.size() != c.ids.size()) {
    ADD_FAILURE() << "llama-server gave " << c.ids.size() << " tokens but " << c.logprobs.size() << " probabilities";
  }
  return c;
}

}  // namespace tessera::testing
