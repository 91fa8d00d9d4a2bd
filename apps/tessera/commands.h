// Subcommands of the `tessera` CLI. Each file adds its options to the app and returns the action to run
// once parsing succeeded; an action returns the process exit code (0 ok, 1 runtime failure).
#pragma once

#include <functional>
#include <initializer_list>

namespace CLI {
class App;
}

namespace tessera::cli {

using Action = std::function<int()>;

// --help lists a command's options by topic, as vLLM's does: moves the named options (flags or positionals) of
// `cmd` under `topic` (main.cc).
void group_options(CLI::App* cmd, const char* topic, std::initializer_list<const char*> names);

Action add_generate_command(CLI::App& app);
Action add_synth_command(CLI::App& app);
Action add_serve_command(CLI::App& app);
Action add_up_command(CLI::App& app);
Action add_join_command(CLI::App& app);
Action add_route_command(CLI::App& app);
Action add_bench_command(CLI::App& app);
Action add_matrix_command(CLI::App& app);
// Subcommands of `tessera bench`, each added to the bench App.
Action add_bench_serve_subcommand(CLI::App& bench);
Action add_bench_conversations_subcommand(CLI::App& bench);
Action add_bench_generate_subcommand(CLI::App& bench);
Action add_bench_matmul_subcommand(CLI::App& bench);
Action add_bench_attention_subcommand(CLI::App& bench);
Action add_bench_sweep_subcommand(CLI::App& bench);
Action add_bench_plot_subcommand(CLI::App& bench);
Action add_bench_decode_step_subcommand(CLI::App& bench);
Action add_bench_step_subcommand(CLI::App& bench);
Action add_link_command(CLI::App& app);
Action add_ctrl_command(CLI::App& app);
Action add_solve_command(CLI::App& app);
Action add_plan_command(CLI::App& app);
Action add_profile_command(CLI::App& app);
Action add_convert_command(CLI::App& app);
Action add_inspect_command(CLI::App& app);
Action add_tokenize_command(CLI::App& app);
Action add_fault_load_command(CLI::App& app);

// Prints "tessera: error: <message>" on one line of stderr and returns 1.
int fail(const std::string& message);

}  // namespace tessera::cli
