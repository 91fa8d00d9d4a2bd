// tessera: one binary, one subcommand per job (generate, synth; serve, route, up, bench... as they land).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "commands.h"
#include "ops/cpu/cpu_backend.h"

namespace tessera::cli {

int fail(const std::string& message) {
  std::fprintf(stderr, "tessera: error: %s\n", message.c_str());
  return 1;
}

}  // namespace tessera::cli

int main(int argc, char** argv) {
  using namespace tessera::cli;
  CLI::App app("Tessera: LLM serving across unlike accelerators", "tessera");
  app.require_subcommand(1);
  app.set_version_flag("--version", "tessera 0.1.0");
  // Global, accepted before or after the subcommand; exported as TESSERA_CPU_ISA so that every cpu backend
  // this process creates (and every child `tessera up` starts) uses the same kernels.
  std::string cpu_isa;
  app.add_option("--cpu-isa", cpu_isa,
                 "cpu kernels: auto, amx, avx512, avx2 or generic (default: TESSERA_CPU_ISA, else auto)");
  app.fallthrough();
  std::vector<std::pair<CLI::App*, Action>> actions;
  auto add = [&](Action (*adder)(CLI::App&)) {
    Action a = adder(app);
    actions.emplace_back(app.get_subcommands({}).back(), std::move(a));
  };
  add(add_generate_command);
  add(add_synth_command);
  add(add_serve_command);
  add(add_up_command);
  add(add_join_command);
  add(add_route_command);
  add(add_bench_command);
  add(add_matrix_command);
  add(add_link_command);
  add(add_ctrl_command);
  add(add_solve_command);
  add(add_plan_command);
  add(add_profile_command);
  add(add_convert_command);
  add(add_inspect_command);
  add(add_tokenize_command);
  add(add_fault_load_command);
  if (argc > 1 && argv[1][0] != '-') {
    std::string known;
    bool found = false;
    for (auto& [sub, action] : actions) {
      found = found || sub->get_name() == argv[1];
      known += (known.empty() ? "" : ", ") + sub->get_name();
    }
    if (!found) {
      std::fprintf(stderr, "tessera: error: unknown command '%s'; commands: %s\n", argv[1], known.c_str());
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    for (char& c : what) c = c == '\n' ? ' ' : c;
    std::fprintf(stderr, "tessera: error: %s (run 'tessera --help' for usage)\n", what.c_str());
    return 2;
  }
  if (!cpu_isa.empty()) {
    auto isa = tessera::ops::cpu::parse_isa(cpu_isa);
    if (!isa.ok()) return fail("--cpu-isa: " + isa.status().message());
    if (!tessera::ops::cpu::isa_supported(*isa)) {
      return fail("--cpu-isa " + cpu_isa +
                  ": this processor cannot run those kernels (it runs: " + tessera::ops::cpu::detected_isa() + ")");
    }
    setenv("TESSERA_CPU_ISA", cpu_isa.c_str(), 1);
  }
  for (auto& [sub, action] : actions) {
    if (sub->parsed()) return action();
  }
  return 2;
}
