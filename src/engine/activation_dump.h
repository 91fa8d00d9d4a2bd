// A RunnerOptions::activation_tap that writes each tapped activation to a file, for comparing Tessera's
// forward pass with another engine's tensor dumps on the same model file (docs/models.md, "Parity at real
// dimensions"). `tessera serve` installs it when TESSERA_DUMP_ACTIVATIONS names a folder.
//
// Files: DIR/<name>-<layer>.<k>.f32 (layer "out" for -1), k counting that point's calls from 0 (one per step:
// k 0 is a prompt's prefill when it fits one chunk, k 1 the first decode step, ...). Each file is two
// little-endian int64 (rows, floats per row) followed by the rows as f32.
//
// Thread-safety: the tap is called from the runner's thread only; it keeps its own counters.
#pragma once

#include <string>

#include "engine/model_runner.h"

namespace tessera::engine {

// The tap writing into `dir` (created if missing). Write errors are reported on stderr once and then ignored:
// a debugging aid must not fail the step it observes.
ActivationTap activation_file_dump(std::string dir);

}  // namespace tessera::engine
