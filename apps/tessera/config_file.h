// `--config FILE.yaml` for every command (vLLM's `vllm serve --config`): a YAML mapping whose keys are the command's
// flag names (dashes or underscores: `max-model-len: 4096` or `max_model_len: 4096`), expanded into the flags they
// name before the command line is parsed, so a config file means exactly what the same flags mean. A flag given
// on the command line wins over the file's. Values: a scalar is the flag's value, `true` a bare switch (`false`
// leaves it out), a list repeats the flag, `model:` is the positional model.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace tessera::cli {

// argv without its --config FILE (or --config=FILE), with the file's flags in its place; argv unchanged when
// there is none. InvalidArgument naming the file and key for a file that does not read or parse, a key that is
// not a plain flag name, or a value that is a mapping.
Result<std::vector<std::string>> expand_config_file(const std::vector<std::string>& argv);

}  // namespace tessera::cli
