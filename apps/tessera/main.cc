// tessera: one binary, one subcommand per job (generate, synth; serve, route, up, bench... as they land).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/log.h"
#include "commands.h"
#include "config_file.h"
#include "ops/cpu/cpu_backend.h"

namespace tessera::cli {

int fail(const std::string& message) {
  std::fprintf(stderr, "tessera: error: %s\n", message.c_str());
  return 1;
}

void group_options(CLI::App* cmd, const char* topic, std::initializer_list<const char*> names) {
  for (const char* n : names) cmd->get_option(n)->group(topic);
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
                 "cpu kernels: auto, amx, avx512, avx2, generic or amx-emulated (tests: the amx kernels with tiles in "
                 "software; default: TESSERA_CPU_ISA, else auto)");
  // Logging (base/log.h): global too, and exported (TESSERA_LOG_LEVEL, TESSERA_LOG_FORMAT) for `tessera up`'s
  // children. Long-running commands log at info by default (their load lines, one access line per request);
  // one-shot commands at warn, so that their stderr stays their result or one error line.
  std::string log_level, log_format;
  app.add_option("--log-level", log_level,
                 "debug, info, warn, error or off (default: TESSERA_LOG_LEVEL, else info for serve/route/up/join/ctrl "
                 "and warn for the rest)");
  app.add_option("--log-format", log_format,
                 "text or json, one object per line (default: TESSERA_LOG_FORMAT, else text)");
  std::string config_unused;  // consumed before parsing (config_file.h); declared for --help
  app.add_option("--config", config_unused,
                 "YAML file of flags for the command (keys: flag names; the command line wins over it)");
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
  // --config FILE.yaml: the file's flags in its place (config_file.h), for every command.
  auto expanded = expand_config_file(std::vector<std::string>(argv, argv + argc));
  if (!expanded.ok()) return fail(expanded.status().message());
  std::vector<char*> args;
  for (std::string& a : *expanded) {
    // llama.cpp's -ctk / -ctv: CLI11 takes one-letter short names only, so they are spelt out here.
    if (a == "-ctk") a = "--cache-type-k";
    if (a == "-ctv") a = "--cache-type-v";
    args.push_back(a.data());
  }
  try {
    app.parse(static_cast<int>(args.size()), args.data());
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
    if (!sub->parsed()) continue;
    const std::string& name = sub->get_name();
    tessera::log::set_component(name);
    if (log_level.empty() && std::getenv("TESSERA_LOG_LEVEL") != nullptr) log_level = std::getenv("TESSERA_LOG_LEVEL");
    if (log_format.empty() && std::getenv("TESSERA_LOG_FORMAT") != nullptr)
      log_format = std::getenv("TESSERA_LOG_FORMAT");
    const bool server = name == "serve" || name == "route" || name == "up" || name == "join" || name == "ctrl";
    auto level = tessera::log::parse_level(log_level.empty() ? (server ? "info" : "warn") : log_level);
    if (!level.ok()) return fail("--log-level: " + level.status().message());
    auto format = tessera::log::parse_format(log_format.empty() ? "text" : log_format);
    if (!format.ok()) return fail("--log-format: " + format.status().message());
    tessera::log::set_level(*level);
    tessera::log::set_format(*format);
    if (!log_level.empty()) setenv("TESSERA_LOG_LEVEL", log_level.c_str(), 1);
    if (!log_format.empty()) setenv("TESSERA_LOG_FORMAT", log_format.c_str(), 1);
    return action();
  }
  return 2;
}
