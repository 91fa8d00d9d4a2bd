// `tessera fault-load`: the load driver of scripts/fault-suite.sh (src/bench/fault_load.h). Prints the summary
// as JSON on stdout, and a markdown row for docs/faults.md with --row LABEL.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "auth_flags.h"
#include "bench/fault_load.h"
#include "commands.h"

namespace tessera::cli {
namespace {

struct LoadArgs {
  bench::FaultLoadOptions load;
  std::string reference;           // compare with this file (JSON lines: {"i", "tokens", "text"})
  std::string write_reference;     // write this run's tokens there
  std::string row;                 // markdown row label
  std::string cluster_token_file;  // presented to the router: it then names the nodes that answered
};

int run_load(const LoadArgs& a) {
  std::optional<bench::LoadReference> reference;
  if (!a.reference.empty()) {
    auto r = bench::read_load_reference(a.reference, a.load.clients * a.load.requests);
    if (!r.ok()) return fail(r.status().message());
    reference = std::move(*r);
  }
  const bench::LoadRun run = bench::run_fault_load(a.load);
  if (!a.write_reference.empty()) {
    if (Status s = bench::write_load_reference(a.write_reference, run.outcomes); !s.ok()) return fail(s.message());
  }
  const nlohmann::json summary = bench::summarize_fault_load(run, reference ? &*reference : nullptr, a.load);
  std::printf("%s\n", summary.dump().c_str());
  if (!a.row.empty()) std::printf("%s\n", bench::fault_load_row(a.row, summary).c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace

Action add_fault_load_command(CLI::App& app) {
  auto a = std::make_shared<LoadArgs>();
  bench::FaultLoadOptions& l = a->load;
  CLI::App* cmd = app.add_subcommand(
      "fault-load", "Streamed greedy load with exact token accounting and an optional fault (scripts/fault-suite.sh)");
  cmd->add_option("--url", l.url, "Router (or node) URL")->required();
  cmd->add_option("--model", l.model, "Model id")->capture_default_str();
  cmd->add_option("--clients", l.clients, "Concurrent clients")->check(CLI::Range(1, 256))->capture_default_str();
  cmd->add_option("--requests", l.requests, "Requests per client")->check(CLI::Range(1, 100000))->capture_default_str();
  cmd->add_option("--max-tokens", l.max_tokens, "Tokens per request (EOS ignored)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--reference", a->reference, "Fault-free run to compare tokens with (from --write-reference)");
  cmd->add_option("--write-reference", a->write_reference, "Write this run's tokens here");
  cmd->add_option("--fault-after", l.fault_after, "Run --fault-cmd once this many requests have completed");
  cmd->add_option("--fault-cmd", l.fault_cmd, "Shell command that injects the fault");
  cmd->add_option("--connect-retry-s", l.connect_retry_s, "Retry refused connections this long")->capture_default_str();
  cmd->add_option("--prompt-words", l.prompt_words, "Pad each prompt with story text to about this many words")
      ->check(CLI::Range(0, 4000));
  cmd->add_option("--slo-ttft-ms", l.slo_ttft_ms, "With --slo-tpot-ms: report requests within this TTFT and goodput");
  cmd->add_option("--slo-tpot-ms", l.slo_tpot_ms, "With --slo-ttft-ms: ... and this mean time per output token");
  cmd->add_option("--cluster-token-file", a->cluster_token_file,
                  "Present this cluster token: the router then names the node and prefill node of each request");
  cmd->add_option("--row", a->row, "Also print a docs/faults.md row with this label");
  return [a] {
    auto token = cli::cluster_token_from_flag(a->cluster_token_file);
    if (!token.ok()) return fail(token.status().to_string());
    a->load.token = std::move(*token);
    return run_load(*a);
  };
}

}  // namespace tessera::cli
