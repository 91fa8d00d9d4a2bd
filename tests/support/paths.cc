#include "support/paths.h"

#include <unistd.h>

#include <filesystem>
#include <mutex>
#include <vector>

#include <gtest/gtest.h>

namespace tessera::testing {
namespace fs = std::filesystem;

std::string tessera_bin() { return TESSERA_BIN; }
std::string source_dir() { return TESSERA_SOURCE_DIR; }
std::string models_dir() { return TESSERA_MODELS_DIR; }
std::string stories260k_dir() { return models_dir() + "/stories260K"; }
bool have_stories260k() { return fs::exists(stories260k_dir() + "/stories260K.bin"); }

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
