#include "bench/conversations.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <string_view>
#include <thread>
#include <unordered_set>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "bench/internal/load_common.h"

namespace tessera::bench {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::vector<int32_t> random_ids(std::mt19937_64& rng, int n, int vocab) {
  std::uniform_int_distribution<int32_t> id(3, vocab - 1);
  std::vector<int32_t> out(static_cast<size_t>(n));
  for (int32_t& t : out) t = id(rng);
  return out;
}

// Chat mode's words: a system prompt or message of n of them, drawn by rng.
std::string random_words(std::mt19937_64& rng, int n) {
  static constexpr const char* kWords[] = {
      "the",      "library", "opens",   "at",     "nine",    "on",       "weekdays", "and",    "ten",     "saturday",
      "while",    "reading", "room",    "closes", "one",     "hour",     "earlier",  "than",   "lending", "desk",
      "every",    "branch",  "follows", "same",   "holiday", "calendar", "please",   "answer", "short",   "polite",
      "question", "about",   "books",   "return", "late",    "fee",      "card",     "member", "child",   "adult",
      "event",    "story",   "time",    "city",   "north",   "south",    "east",     "west",   "near",    "park",
      "station",  "bus",     "train",   "bike",   "parking", "free",     "cost",     "price",  "week",    "month",
      "year",     "morning", "evening", "night",  "open",    "closed",   "when",     "where",  "how",     "why",
      "can",      "could",   "would",   "should", "will",    "do",       "does",     "is",     "are",     "was",
      "my",       "your",    "our",     "their",  "with",    "without",  "for",      "from",   "into",    "over"};
  std::uniform_int_distribution<size_t> pick(0, std::size(kWords) - 1);
  std::string out;
  for (int i = 0; i < n; ++i) {
    if (i > 0) out += ' ';
    out += kWords[pick(rng)];
  }
  return out;
}

// One streamed turn: fills r.output, r.ttft_s, r.itl_s, r.cached_tokens, r.latency_s, r.error (chat: r.prompt and
// r.text too, from `messages`).
void run_turn(const ConversationOptions& o, const std::string& model, TurnResult& r, const json& messages) {
  json body = {{"model", model},
               {"max_tokens", o.output_len},
               {"temperature", 0},
               {"ignore_eos", true},
               {"return_token_ids", true},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  if (o.chat)
    body["messages"] = messages;
  else
    body["prompt"] = r.prompt;
  const auto t0 = Clock::now();
  auto last = t0;
  auto on_choice = [&](const json& choice, const json& chunk) {
    if (o.chat && chunk.contains("prompt_token_ids") && chunk["prompt_token_ids"].is_array())
      r.prompt = chunk["prompt_token_ids"].get<std::vector<int32_t>>();
    if (o.chat && choice.contains("delta") && choice["delta"].is_object()) {
      const json& content = choice["delta"].value("content", json());
      if (content.is_string()) r.text += content.get<std::string>();
    }
    const json& ids = choice.value("token_ids", json::array());
    if (!ids.is_array() || ids.empty()) return;
    const auto now = Clock::now();
    if (r.output.empty())
      r.ttft_s = std::chrono::duration<double>(now - t0).count();
    else
      r.itl_s.push_back(std::chrono::duration<double>(now - last).count());
    last = now;
    for (const json& id : ids) r.output.push_back(id.get<int32_t>());
  };
  internal::StreamedCall call = internal::stream_completion(o.url, body, o.timeout_s, on_choice,
                                                            o.chat ? "/v1/chat/completions" : "/v1/completions");
  r.latency_s = call.latency_s;
  r.error = call.error;
  if (call.usage.is_object()) {
    const json details = call.usage.value("prompt_tokens_details", json::object());
    if (details.is_object()) r.cached_tokens = details.value("cached_tokens", 0);
  }
  if (r.error.empty() && static_cast<int>(r.output.size()) != o.output_len) {
    // The server did not return the reply's ids (no return_token_ids), or cut the reply short.
    r.error = fmt::format("the reply had {} token ids, {} were asked for", r.output.size(), o.output_len);
  }
  if (r.error.empty() && r.prompt.empty()) r.error = "the server did not return the prompt's token ids";
  r.success = r.error.empty();
}

// The chain of block keys of `tokens`' leading full blocks (each key digests its block and the one before).
std::vector<uint64_t> block_chain(const std::vector<int32_t>& tokens, size_t n_tokens, int block_tokens) {
  std::vector<uint64_t> chain;
  uint64_t prev = 0;
  const auto bt = static_cast<size_t>(block_tokens);
  for (size_t b = 0; (b + 1) * bt <= n_tokens; ++b) {
    std::string key(sizeof prev + bt * sizeof(int32_t), '\0');
    std::memcpy(key.data(), &prev, sizeof prev);
    std::memcpy(key.data() + sizeof prev, tokens.data() + b * bt, bt * sizeof(int32_t));
    prev = std::hash<std::string_view>{}(key);
    chain.push_back(prev);
  }
  return chain;
}

}  // namespace

double oracle_hit_rate(const std::vector<TurnResult>& turns, int block_tokens) {
  std::vector<const TurnResult*> done;
  for (const TurnResult& t : turns)
    if (t.success) done.push_back(&t);
  std::vector<const TurnResult*> by_start = done, by_end = done;
  std::sort(by_start.begin(), by_start.end(), [](auto* a, auto* b) { return a->start_s < b->start_s; });
  std::sort(by_end.begin(), by_end.end(),
            [](auto* a, auto* b) { return a->start_s + a->latency_s < b->start_s + b->latency_s; });
  std::unordered_set<uint64_t> cache;
  size_t ended = 0;
  double hit = 0, total = 0;
  for (const TurnResult* t : by_start) {
    for (; ended < by_end.size() && by_end[ended]->start_s + by_end[ended]->latency_s <= t->start_s; ++ended) {
      const TurnResult& e = *by_end[ended];
      std::vector<int32_t> seq = e.prompt;
      seq.insert(seq.end(), e.output.begin(), e.output.end());
      const size_t computed = seq.empty() ? 0 : seq.size() - 1;  // the last reply token is never fed back
      for (uint64_t k : block_chain(seq, computed, block_tokens)) cache.insert(k);
    }
    const std::vector<uint64_t> chain = block_chain(t->prompt, t->prompt.size(), block_tokens);
    const size_t usable = t->prompt.empty() ? 0 : (t->prompt.size() - 1) / static_cast<size_t>(block_tokens);
    size_t matched = 0;
    while (matched < std::min(usable, chain.size()) && cache.count(chain[matched])) ++matched;
    hit += static_cast<double>(matched * static_cast<size_t>(block_tokens));
    total += static_cast<double>(t->prompt.size());
    for (uint64_t k : chain) cache.insert(k);
  }
  return total > 0 ? hit / total : 0.0;
}

Result<ConversationResult> run_conversations(const ConversationOptions& o) {
  if (o.tenants < 1 || o.users_per_tenant < 1 || o.turns < 1 || o.system_len < 0 || o.user_len < 1 ||
      o.output_len < 1 || o.think_s < 0 || o.ramp_s < 0 || o.block_tokens < 1)
    return invalid_argument("conversations: tenants, users, turns, user and output lengths must be positive");
  TS_ASSIGN_OR_RETURN(internal::ServedModel served, internal::served_model(o.url, o.model));
  ConversationResult result;
  result.model = served.id;
  const int vocab = o.vocab_size > 0 ? o.vocab_size : served.vocab_size, context = served.max_model_len;
  if (vocab < 4 && !o.chat)
    return invalid_argument("conversations: the vocabulary size is unknown (give --vocab-size)");
  const int longest = o.system_len + o.turns * (o.user_len + o.output_len);
  if (context > 0 && longest > context && !o.chat)  // (chat counts words, which the server's template adds to)
    return invalid_argument(fmt::format(
        "conversations: the last turn needs {} tokens of context (system {} + {} turns x (user {} + reply {})), "
        "the model serves {}",
        longest, o.system_len, o.turns, o.user_len, o.output_len, context));

  const int users = o.tenants * o.users_per_tenant;
  result.turns.resize(static_cast<size_t>(users * o.turns));
  std::vector<std::vector<int32_t>> system(static_cast<size_t>(o.tenants));
  std::vector<std::string> system_text(static_cast<size_t>(o.tenants));
  for (int t = 0; t < o.tenants; ++t) {
    std::mt19937_64 rng(o.seed * 1000003 + static_cast<uint64_t>(t));
    if (o.chat)
      system_text[static_cast<size_t>(t)] = random_words(rng, o.system_len);
    else
      system[static_cast<size_t>(t)] = random_ids(rng, o.system_len, vocab);
  }
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int u = 0; u < users; ++u) {
    threads.emplace_back([&, u] {
      const int tenant = u % o.tenants;  // tenants interleaved, so each one's users start spread out
      std::mt19937_64 rng(o.seed * 7919 + 1000 + static_cast<uint64_t>(u));
      std::exponential_distribution<double> think(o.think_s > 0 ? 1.0 / o.think_s : 1.0);
      std::vector<int32_t> history = system[static_cast<size_t>(tenant)];
      json messages = json::array();
      if (o.chat && o.system_len > 0)
        messages.push_back({{"role", "system"}, {"content", system_text[static_cast<size_t>(tenant)]}});
      // Each turn has its time in a schedule fixed by the seed (a user's turns `think` apart on average, from
      // one send to the next), so every server sees the same request rate; a turn whose previous reply is
      // late goes as soon as that reply is in.
      double at = o.ramp_s * u / std::max(1, users);
      for (int k = 0; k < o.turns; ++k) {
        std::this_thread::sleep_until(start +
                                      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(at)));
        TurnResult& r = result.turns[static_cast<size_t>(u * o.turns + k)];
        r.tenant = tenant;
        r.user = u;
        r.turn = k;
        if (o.chat) {
          messages.push_back({{"role", "user"}, {"content", random_words(rng, o.user_len)}});
        } else {
          std::vector<int32_t> message = random_ids(rng, o.user_len, vocab);
          history.insert(history.end(), message.begin(), message.end());
          r.prompt = history;
        }
        r.sent = true;
        r.start_s = since(start);
        run_turn(o, result.model, r, messages);
        at += o.think_s > 0 ? think(rng) : 0.0;
        if (!r.success) break;  // the conversation cannot go on without its reply
        history.insert(history.end(), r.output.begin(), r.output.end());
        if (o.chat) messages.push_back({{"role", "assistant"}, {"content", r.text}});
      }
    });
  }
  for (std::thread& t : threads) t.join();
  result.duration_s = since(start);

  internal::LoadTotals totals(o.goodput_ttft_ms, o.goodput_tpot_ms);
  int sent = 0;
  int64_t total_in = 0, cached = 0;
  json records = json::array(), errors = json::array();
  for (const TurnResult& r : result.turns) {
    if (!r.sent) continue;  // an earlier turn of its conversation failed
    sent++;
    records.push_back({{"tenant", r.tenant},
                       {"user", r.user},
                       {"turn", r.turn},
                       {"prompt_len", r.prompt.size()},
                       {"cached_tokens", r.cached_tokens},
                       {"ttft_s", r.ttft_s},
                       {"latency_s", r.latency_s},
                       {"output_ids", r.output},
                       {"error", r.error}});
    if (!r.success) {
      errors.push_back(r.error);
      continue;
    }
    total_in += static_cast<int64_t>(r.prompt.size());
    cached += r.cached_tokens;
    totals.add(static_cast<int64_t>(r.prompt.size()), static_cast<int64_t>(r.output.size()), r.ttft_s, r.latency_s,
               r.itl_s);
  }
  json j;
  j["model_id"] = result.model;
  j["dataset"] = "conversations";
  j["tenants"] = o.tenants;
  j["users_per_tenant"] = o.users_per_tenant;
  j["turns"] = o.turns;
  j["system_len"] = o.system_len;
  j["user_len"] = o.user_len;
  j["output_len"] = o.output_len;
  j["think_s"] = o.think_s;
  j["seed"] = o.seed;
  j["chat"] = o.chat;
  j["num_prompts"] = sent;
  totals.put(j, sent, result.duration_s);
  j["cached_tokens"] = cached;
  j["hit_rate"] = total_in > 0 ? static_cast<double>(cached) / static_cast<double>(total_in) : 0.0;
  j["oracle_hit_rate"] = oracle_hit_rate(result.turns, o.block_tokens);
  j["errors"] = errors;
  j["requests"] = records;
  result.json = j.dump(2, ' ', false, json::error_handler_t::replace);
  return result;
}

}  // namespace tessera::bench
