#include "model/hf_cache.h"

#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "base/mapped_file.h"

namespace tessera::model {
namespace fs = std::filesystem;
namespace {

bool repo_part(std::string_view s) {
  if (s.empty() || s == "." || s == ".." || s.size() > 96) return false;
  for (char c : s) {
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

bool is_hex(std::string_view s) {
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return !s.empty();
}

std::string first_line(const fs::path& p) {
  auto text = read_file(p.string());  // a named pipe or device reads as nothing, never waits for a writer
  std::string line = text.ok() ? text->substr(0, text->find('\n')) : std::string();
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r' || line.back() == ' ')) line.pop_back();
  return line;
}

}  // namespace

std::string hf_hub_cache_dir() {
  if (const char* c = std::getenv("HF_HUB_CACHE"); c != nullptr && *c != '\0') return c;
  if (const char* h = std::getenv("HF_HOME"); h != nullptr && *h != '\0') return (fs::path(h) / "hub").string();
  const char* home = std::getenv("HOME");
  return (fs::path(home != nullptr ? home : "/root") / ".cache" / "huggingface" / "hub").string();
}

bool looks_like_repo_id(std::string_view ref) {
  const size_t at = ref.find('@');
  const std::string_view id = ref.substr(0, at);
  if (at != std::string_view::npos && !repo_part(ref.substr(at + 1))) return false;
  const size_t slash = id.find('/');
  if (slash == std::string_view::npos || id.find('/', slash + 1) != std::string_view::npos) return false;
  return repo_part(id.substr(0, slash)) && repo_part(id.substr(slash + 1));
}

Result<ModelReference> resolve_model_reference(const std::string& ref) {
  std::error_code ec;
  if (fs::exists(ref, ec)) return ModelReference{ref, "", ""};
  if (!looks_like_repo_id(ref)) {
    return not_found(
        fmt::format("model '{}' is not a file or a folder (nor a Hugging Face repository id ORG/NAME)", ref));
  }
  const size_t at = ref.find('@');
  const std::string repo = ref.substr(0, at);
  const std::string revision = at == std::string::npos ? "main" : ref.substr(at + 1);
  const std::string cache = hf_hub_cache_dir();
  std::string folder_name = "models--" + repo;
  folder_name.replace(folder_name.find('/'), 1, "--");
  const fs::path folder = fs::path(cache) / folder_name;
  const std::string how = fmt::format(
      "download it where the hub is reachable (`huggingface-cli download {}`{}) and copy {} here, or give a path", repo,
      revision == "main" ? "" : " --revision " + revision, folder.string());
  if (!fs::is_directory(folder, ec)) {
    return not_found(
        fmt::format("model '{}' is not a local path and is not in the Hugging Face cache (looked for {}; "
                    "the cache is $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub); {}",
                    ref, folder.string(), how));
  }
  // A ref name (refs/main, refs/v1.0) holds a commit; a commit hash (or a prefix) names a snapshot directly.
  std::string commit;
  if (fs::is_regular_file(folder / "refs" / revision, ec)) {
    commit = first_line(folder / "refs" / revision);
  } else if (is_hex(revision) && revision.size() >= 7) {
    for (const auto& e : fs::directory_iterator(folder / "snapshots", ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind(revision, 0) != 0) continue;
      if (!commit.empty())
        return invalid_argument(fmt::format("revision '{}' of {} matches more than one snapshot", revision, repo));
      commit = name;
    }
  }
  if (commit.empty()) {
    return not_found(
        fmt::format("{} is in the Hugging Face cache ({}) but its revision '{}' is not (no refs/{} and no "
                    "snapshot of that commit); {}",
                    repo, folder.string(), revision, revision, how));
  }
  const fs::path snapshot = folder / "snapshots" / commit;
  if (!fs::is_directory(snapshot, ec)) {
    return not_found(fmt::format("{}@{} points at commit {}, whose snapshot {} is missing; {}", repo, revision, commit,
                                 snapshot.string(), how));
  }
  return ModelReference{snapshot.string(), repo, commit};
}

}  // namespace tessera::model
