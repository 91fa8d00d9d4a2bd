// Model references as users type them (`tessera serve Qwen/Qwen3-0.6B`, vLLM's `vllm serve MODEL`): a path, or a
// Hugging Face repository id ORG/NAME[@REVISION] found in the local Hugging Face cache, the way huggingface_hub
// lays it out: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub, holding
// models--ORG--NAME/refs/REVISION (a commit hash) and models--ORG--NAME/snapshots/COMMIT/ (the files). These
// machines reach no model hub: a reference that is not in the cache is an error saying where it looked and how to
// download it elsewhere.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace tessera::model {

struct ModelReference {
  std::string path;     // a file or folder to load
  std::string repo_id;  // "ORG/NAME" when it came from the cache ("" for a plain path)
  std::string commit;   // the snapshot's commit, when it came from the cache
};

// The Hugging Face hub cache folder the environment names (it need not exist).
std::string hf_hub_cache_dir();
// True for ORG/NAME or ORG/NAME@REV (letters, digits, '-', '_', '.'; neither part "." or ".." or empty).
bool looks_like_repo_id(std::string_view ref);
// `ref` as it exists on disk; else, when it looks like a repository id, its snapshot in the cache (REVISION a ref
// name such as main, or a commit hash or a prefix of one, at least 7 hex digits). NotFound naming the folders
// looked in and the command that downloads it; InvalidArgument for a revision that names nothing.
Result<ModelReference> resolve_model_reference(const std::string& ref);

}  // namespace tessera::model
