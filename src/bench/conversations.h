// The multi-turn load behind `tessera bench conversations`: a seeded replay of chat conversations the way a
// fleet sees them. Several tenants each have a long system prompt their users share; every user holds one
// conversation of several turns, each turn sending the whole history so far (system prompt, every earlier
// user message and reply) plus a new user message, at times a seeded schedule fixes (so every server sees
// the same request rate). Prompts are token ids (the completions API), and the reply's ids come back with
// vLLM's `return_token_ids`, so the history is exactly what the model produced whatever the tokenizer. With `chat`
// they are conversations (chat completions: a system message, user messages of seeded words, each reply's text sent
// back as the assistant's message), as a chat client sends them, through the server's chat template; the prompts'
// and replies' ids come back with `return_token_ids` for the oracle.
//
// Beside TTFT/TPOT/goodput it reports the hit rate an infinite prefix cache shared by the whole cluster
// would reach on the same replay (the oracle: every full block of every prompt and reply seen before is
// cached), to set against what the nodes' caches really supplied (usage.prompt_tokens_details.cached_tokens).
//
// Thread-safety: run_conversations runs one thread per user; the other functions are pure.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace tessera::bench {

struct ConversationOptions {
  std::string url;    // http://host:port
  std::string model;  // "": the first model the server lists
  int tenants = 4;
  int users_per_tenant = 4;
  int turns = 6;
  int system_len = 512;  // tokens of each tenant's system prompt (chat: words)
  int user_len = 64;     // tokens of each user message (chat: words)
  int output_len = 32;   // tokens of each reply (ignore_eos)
  double think_s = 2.0;  // mean gap between a user's turns, send to send (exponential; later if the reply is late)
  double ramp_s = 4.0;   // users start evenly spread over this many seconds
  uint64_t seed = 0;
  int vocab_size = 0;     // 0: the server's; ids drawn from [3, vocab_size)
  int block_tokens = 16;  // the oracle's block size (the nodes' --block-size)
  double goodput_ttft_ms = 0;
  double goodput_tpot_ms = 0;
  int timeout_s = 600;
  bool chat = false;  // chat completions (see above)
};

struct TurnResult {
  int tenant = 0, user = 0, turn = 0;
  bool success = false;
  std::string error;
  bool sent = false;
  std::vector<int32_t> prompt;  // chat: the ids the server made of the conversation (prompt_token_ids)
  std::vector<int32_t> output;  // the reply's token ids
  std::string text;             // chat: the reply's text
  int cached_tokens = 0;        // what the server said its caches supplied
  double start_s = 0;           // from the run's start
  double ttft_s = 0, latency_s = 0;
  std::vector<double> itl_s;
};

struct ConversationResult {
  std::vector<TurnResult> turns;  // user-major, then turn
  double duration_s = 0;
  std::string model;
  std::string json;  // the report
};

Result<ConversationResult> run_conversations(const ConversationOptions& options);

// The oracle's hit rate over `turns` (successful ones only): each request, taken in order of start, may reuse
// the leading full blocks of its prompt that an infinite cache shared by every node holds by then: the full
// blocks of every prompt started before it and of every (prompt + reply) finished before it started; the
// prompt's last position is always computed. Hit tokens / prompt tokens.
double oracle_hit_rate(const std::vector<TurnResult>& turns, int block_tokens);

}  // namespace tessera::bench
