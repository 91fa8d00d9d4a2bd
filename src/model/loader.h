// load_model: from what a user types (--model PATH [--tokenizer PATH]) to a config, weights and tokenizer.
//
// PATH may be a checkpoint file or a directory. A directory must hold exactly one checkpoint and, unless
// --tokenizer is given, exactly one tokenizer; files are recognised by content, not by name. The tokenizer's
// vocabulary must be the model's.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "model/model_config.h"
#include "model/tokenizer/tokenizer.h"
#include "model/weights.h"

namespace tessera::model {

struct LoadedModel {
  std::string name;  // file stem of the checkpoint ("stories260K"): the id servers report
  std::string checkpoint_path;
  std::string tokenizer_path;
  ModelConfig config;
  ModelWeights weights;
  std::unique_ptr<Tokenizer> tokenizer;
};

Result<LoadedModel> load_model(const std::string& model_path, const std::string& tokenizer_path = "");

}  // namespace tessera::model
