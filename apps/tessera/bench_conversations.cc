// `tessera bench conversations`: the multi-turn replay (see src/bench/conversations.h).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <memory>

#include <fmt/core.h>

#include "bench/conversations.h"
#include "commands.h"

namespace tessera::cli {
namespace {

struct BenchConversationsArgs {
  bench::ConversationOptions o;
  std::string out;
};

int run_bench_conversations(const BenchConversationsArgs& a) {
  auto r = bench::run_conversations(a.o);
  if (!r.ok()) return fail(r.status().message());
  if (!a.out.empty()) {
    std::ofstream f(a.out);
    f << r->json << "\n";
    if (!f) return fail(fmt::format("cannot write {}", a.out));
  }
  int sent = 0, ok = 0;
  const bench::TurnResult* first_error = nullptr;
  for (const auto& t : r->turns) {
    if (!t.sent) continue;
    sent++;
    ok += t.success;
    if (!t.success && !first_error) first_error = &t;
  }
  int64_t prompt_tokens = 0, cached = 0;
  for (const auto& t : r->turns) {
    if (!t.success) continue;
    prompt_tokens += static_cast<int64_t>(t.prompt.size());
    cached += t.cached_tokens;
  }
  std::printf("%d/%d turns of %d conversations in %.2f s: %.2f req/s, hit rate %.3f (oracle %.3f)\n", ok, sent,
              a.o.tenants * a.o.users_per_tenant, r->duration_s, ok / r->duration_s,
              prompt_tokens > 0 ? static_cast<double>(cached) / static_cast<double>(prompt_tokens) : 0.0,
              bench::oracle_hit_rate(r->turns, a.o.block_tokens));
  if (first_error) std::printf("first error: %s\n", first_error->error.c_str());
  const int expected = a.o.tenants * a.o.users_per_tenant * a.o.turns;
  return ok == expected ? 0 : 1;
}

}  // namespace

Action add_bench_conversations_subcommand(CLI::App& bench) {
  auto a = std::make_shared<BenchConversationsArgs>();
  CLI::App* cmd = bench.add_subcommand(
      "conversations", "Replay seeded multi-turn conversations (tenants with shared system prompts, growing history)");
  bench::ConversationOptions& o = a->o;
  cmd->add_option("--url", o.url, "The server (a node or a router): http://HOST:PORT")->required();
  cmd->add_option("--model", o.model, "Model name (default: the first the server lists)");
  cmd->add_option("--tenants", o.tenants, "Tenants, each with its own system prompt")->capture_default_str();
  cmd->add_option("--users-per-tenant", o.users_per_tenant, "Users (conversations) per tenant")->capture_default_str();
  cmd->add_option("--turns", o.turns, "Turns per conversation")->capture_default_str();
  cmd->add_option("--system-len", o.system_len, "Tokens of each tenant's system prompt (--chat: words)")
      ->capture_default_str();
  cmd->add_option("--user-len", o.user_len, "Tokens of each user message (--chat: words)")->capture_default_str();
  cmd->add_option("--output-len", o.output_len, "Tokens of each reply")->capture_default_str();
  cmd->add_option("--think", o.think_s,
                  "Mean gap between a user's turns, send to send, seconds (exponential; a late reply delays the next)")
      ->capture_default_str();
  cmd->add_option("--ramp", o.ramp_s, "Users start evenly spread over this many seconds")->capture_default_str();
  cmd->add_option("--seed", o.seed, "Seed of the prompts and think times")->capture_default_str();
  cmd->add_option("--vocab-size", o.vocab_size, "Token ids drawn from [3, N) (default: the server's vocabulary)");
  cmd->add_option("--block-size", o.block_tokens, "The oracle's block size (the nodes' --block-size)")
      ->capture_default_str();
  cmd->add_option("--goodput-ttft-ms", o.goodput_ttft_ms, "TTFT objective for goodput (ms)");
  cmd->add_option("--goodput-tpot-ms", o.goodput_tpot_ms, "TPOT objective for goodput (ms)");
  cmd->add_option("--timeout", o.timeout_s, "Per-request timeout, seconds")->capture_default_str();
  cmd->add_flag("--chat", o.chat,
                "Chat completions: a system message and user messages of seeded words (the lengths count words), "
                "each reply's text sent back as the assistant's message, through the server's chat template");
  cmd->add_option("--out", a->out, "Write the result JSON (every turn's reply token ids included) here");
  return [a] { return run_bench_conversations(*a); };
}

}  // namespace tessera::cli
