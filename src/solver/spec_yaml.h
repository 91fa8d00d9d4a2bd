// Reading the solver's YAML files (fleet, workload, SLO, device profile) into spec.h values, and writing
// profiles. The schema is in docs/solver.md. Every problem (a missing file, a YAML syntax error, an unknown
// or misspelt key, a value of the wrong type or out of range) is an InvalidArgument / NotFound status
// naming the file and the key; nothing throws out of this module.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <string>

#include "base/status.h"
#include "solver/profile.h"
#include "solver/spec.h"

namespace tessera::solver {

// `origin` names the text in messages; relative paths inside (profile:, trace:) resolve against `base_dir`.
Result<Fleet> parse_fleet(const std::string& text, const std::string& origin, const std::string& base_dir);
Result<Workload> parse_workload(const std::string& text, const std::string& origin, const std::string& base_dir);
Result<Slo> parse_slo(const std::string& text, const std::string& origin);
Result<DeviceProfile> parse_profile(const std::string& text, const std::string& origin);

Result<Fleet> load_fleet(const std::string& path);
Result<Workload> load_workload(const std::string& path);
Result<Slo> load_slo(const std::string& path);
Result<DeviceProfile> load_profile(const std::string& path);

std::string profile_to_yaml(const DeviceProfile& p);

}  // namespace tessera::solver
