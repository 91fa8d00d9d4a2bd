#include "support/paths.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <vector>

#include <gtest/gtest.h>

namespace tessera::testing {
namespace fs = std::filesystem;

// TESSERA_TEST_TESSERA_BIN runs the tests against another build of the binary (e.g. a copy kept for a long run
// while this tree rebuilds).
std::string tessera_bin() {
  const char* e = std::getenv("TESSERA_TEST_TESSERA_BIN");
  return e != nullptr && *e != '\0' ? e : TESSERA_BIN;
}
std::string source_dir() { return TESSERA_SOURCE_DIR; }
std::string models_dir() { return TESSERA_MODELS_DIR; }
std::string stories260k_dir() { return models_dir() + "/stories260K"; }
bool have_stories260k() { return fs::exists(stories260k_dir() + "/stories260K.bin"); }

namespace {
std::vector<fs::path> vocab_candidates() {
  std::vector<fs::path> c;
  if (const char* s = std::getenv("TESSERA_LLAMACPP_SRC")) c.push_back(fs::path(s) / "models");
  if (const char* b = std::getenv("TESSERA_LLAMACPP_BIN")) c.push_back(fs::path(b) / ".." / ".." / "src" / "models");
  std::string cache = std::getenv("TESSERA_CACHE") ? std::getenv("TESSERA_CACHE")
                      : std::getenv("HOME")        ? std::string(std::getenv("HOME")) + "/.cache/tessera"
                                                   : "/root/.cache/tessera";
  c.push_back(fs::path(cache) / "llama.cpp" / "3.21.1" / "src" / "models");
  c.push_back(fs::path(cache) / "llama.cpp" / "src" / "models");
  return c;
}
}  // namespace

std::string llamacpp_vocab_dir() {
  std::error_code ec;
  for (const fs::path& p : vocab_candidates())
    if (fs::exists(p / "ggml-vocab-llama-spm.gguf", ec)) return p.lexically_normal().string();
  return "";
}

std::string llamacpp_templates_dir() {
  if (const char* s = std::getenv("TESSERA_LLAMACPP_SRC")) return std::string(s) + "/models/templates";
  const char* home = std::getenv("HOME");
  const char* cache = std::getenv("TESSERA_CACHE");
  const std::string root = cache ? cache : std::string(home ? home : "/root") + "/.cache/tessera";
  return root + "/llama.cpp/3.21.1/src/models/templates";
}

std::string llamacpp_vocab_candidates() {
  std::string out;
  for (const fs::path& p : vocab_candidates()) out += (out.empty() ? "" : ", ") + p.string();
  return out;
}

namespace {
struct ScratchDirs {
  std::mutex mu;
  std::vector<fs::path> dirs;
  ~ScratchDirs() {
    std::error_code ec;
    for (const fs::path& d : dirs) fs::remove_all(d, ec);
  }
};
ScratchDirs& scratch_dirs() {
  static ScratchDirs s;
  return s;
}
}  // namespace

std::string scratch_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "tessera";
  for (char& c : name) {
    if (c == '/') c = '_';
  }
  fs::path dir = fs::temp_directory_path() / ("tessera-test-" + std::to_string(getpid()) + "-" + name);
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir);
  std::lock_guard<std::mutex> lock(scratch_dirs().mu);
  scratch_dirs().dirs.push_back(dir);
  return dir.string();
}

}  // namespace tessera::testing
