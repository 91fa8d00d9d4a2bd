// Subcommands of the `tessera` CLI. Each file adds its options to the app and returns the action to run
// once parsing succeeded; an action returns the process exit code (0 ok, 1 runtime failure).
#pragma once

#include <functional>

namespace CLI {
class App;
}

namespace tessera::cli {

using Action = std::function<int()>;

Action add_generate_command(CLI::App& app);
Action add_synth_command(CLI::App& app);
Action add_convert_command(CLI::App& app);
Action add_inspect_command(CLI::App& app);

// Prints "tessera: error: <message>" on one line of stderr and returns 1.
int fail(const std::string& message);

}  // namespace tessera::cli
