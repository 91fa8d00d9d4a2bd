#include "config_file.h"

#include <yaml-cpp/yaml.h>

#include <set>

#include <fmt/format.h>

#include "base/mapped_file.h"

namespace tessera::cli {
namespace {

std::string flag_name(std::string key) {
  for (char& c : key)
    if (c == '_') c = '-';
  return key;
}

bool plain_key(const std::string& k) {
  if (k.empty() || k[0] == '-') return false;
  for (char c : k)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
      return false;
  return true;
}

}  // namespace

Result<std::vector<std::string>> expand_config_file(const std::vector<std::string>& argv) {
  size_t at = argv.size();
  std::string path;
  for (size_t i = 1; i < argv.size(); ++i) {
    if (argv[i] == "--config") {
      if (i + 1 >= argv.size()) return invalid_argument("--config needs a file");
      at = i;
      path = argv[i + 1];
      break;
    }
    if (argv[i].rfind("--config=", 0) == 0) {
      at = i;
      path = argv[i].substr(9);
      break;
    }
  }
  if (at == argv.size()) return argv;
  const size_t consumed = argv[at] == "--config" ? 2 : 1;
  // The flags the command line gives itself: the file does not repeat them.
  std::set<std::string> given;
  for (size_t i = 1; i < argv.size(); ++i) {
    if (i >= at && i < at + consumed) continue;
    if (argv[i].rfind("--", 0) == 0) given.insert(argv[i].substr(2, argv[i].find('=') - 2));
  }
  if (Status st = check_regular_file(path); !st.ok()) return st.with_context("--config");
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    return invalid_argument(fmt::format("--config {}: {}", path, e.what()));
  }
  if (!root.IsMap())
    return invalid_argument(fmt::format("--config {}: expected a mapping of flag names to values", path));
  std::vector<std::string> flags;
  for (const auto& kv : root) {
    const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : std::string();
    if (!plain_key(key)) return invalid_argument(fmt::format("--config {}: '{}' is not a flag name", path, key));
    const std::string flag = flag_name(key);
    if (flag == "config") return invalid_argument(fmt::format("--config {}: a config file cannot name another", path));
    if (given.count(flag) != 0) continue;
    const YAML::Node& v = kv.second;
    if (v.IsNull()) continue;
    if (v.IsMap()) return invalid_argument(fmt::format("--config {}: '{}' has a mapping as its value", path, key));
    std::vector<std::string> values;
    if (v.IsSequence()) {
      for (const auto& e : v) {
        if (!e.IsScalar()) return invalid_argument(fmt::format("--config {}: '{}' holds a nested value", path, key));
        values.push_back(e.Scalar());
      }
    } else {
      values.push_back(v.Scalar());
    }
    for (const std::string& value : values) {
      if (value == "true" || value == "false") {
        if (value == "true") flags.push_back("--" + flag);
        continue;
      }
      // One token: a value never becomes a positional argument when its flag is unknown.
      flags.push_back("--" + flag + "=" + value);
    }
  }
  std::vector<std::string> out(argv.begin(), argv.begin() + static_cast<std::ptrdiff_t>(at));
  out.insert(out.end(), flags.begin(), flags.end());
  out.insert(out.end(), argv.begin() + static_cast<std::ptrdiff_t>(at + consumed), argv.end());
  return out;
}

}  // namespace tessera::cli
