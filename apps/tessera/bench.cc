// `tessera bench ...`: the benchmark family; each benchmark is one subcommand in its own file.
#include <CLI/CLI.hpp>

#include <memory>
#include <vector>

#include "commands.h"

namespace tessera::cli {

Action add_bench_command(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  auto subs = std::make_shared<std::vector<std::pair<CLI::App*, Action>>>();
  for (Action (*adder)(CLI::App&) :
       {add_bench_generate_subcommand, add_bench_serve_subcommand, add_bench_conversations_subcommand,
        add_bench_sweep_subcommand, add_bench_plot_subcommand, add_bench_decode_step_subcommand,
        add_bench_step_subcommand, add_bench_matmul_subcommand, add_bench_attention_subcommand}) {
    Action a = adder(*bench);
    subs->emplace_back(bench->get_subcommands({}).back(), std::move(a));
  }
  return [subs] {
    for (auto& [sub, action] : *subs) {
      if (sub->parsed()) return action();
    }
    return 2;
  };
}

}  // namespace tessera::cli
