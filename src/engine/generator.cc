#include "engine/generator.h"

#include <chrono>

#include <fmt/core.h>

namespace tessera::engine {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Result<GenerateStats> generate(ModelRunner& runner, const model::Tokenizer& tokenizer, std::string_view prompt,
                               const GenerateOptions& options, const std::function<void(std::string_view)>& on_text) {
  TS_RETURN_IF_ERROR(validate(options.sampling));
  if (options.max_tokens < 0)
    return invalid_argument(fmt::format("max_tokens must be >= 0, got {}", options.max_tokens));
  const model::ModelConfig& config = runner.config();
  std::vector<TokenId> tokens = tokenizer.encode(prompt, /*add_bos=*/true);
  if (static_cast<int64_t>(tokens.size()) > config.max_seq_len) {
    return invalid_argument(fmt::format("the prompt is {} tokens long; the model's context is {} positions",
                                        tokens.size(), config.max_seq_len));
  }
  GenerateStats stats;
  stats.prompt_tokens = static_cast<int>(tokens.size());
  if (options.echo_prompt) {
    // BOS has no text; tokenizers that add no BOS (Qwen's) start with a real token, which is echoed too.
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i == 0 && tokens[0] == tokenizer.bos_id()) continue;
      on_text(tokenizer.decode_piece(i == 0 ? -1 : tokens[i - 1], tokens[i]));
    }
  }
  if (options.max_tokens == 0) return stats;

  SequenceKv seq;
  std::vector<float> logits;
  auto t0 = std::chrono::steady_clock::now();
  Status st = runner.prefill(seq, tokens, logits);
  stats.prefill_seconds = seconds_since(t0);
  if (!st.ok()) {
    runner.release(seq);
    return st;
  }
  Sampler sampler(options.sampling);
  TokenId current = tokens.back();
  for (;;) {
    TokenId next = sampler.sample(logits);
    const std::vector<TokenId>& eog = options.end_of_generation;
    if (eog.empty() ? (next == tokenizer.bos_id() || next == tokenizer.eos_id())
                    : std::find(eog.begin(), eog.end(), next) != eog.end()) {
      stats.finish = FinishReason::kStop;
      break;
    }
    on_text(tokenizer.decode_piece(current, next));
    current = next;
    if (++stats.generated_tokens >= options.max_tokens) {
      stats.finish = FinishReason::kLength;
      break;
    }
    if (seq.length >= config.max_seq_len) {
      stats.finish = FinishReason::kLength;
      break;
    }
    SequenceKv* seqs[] = {&seq};
    auto t1 = std::chrono::steady_clock::now();
    st = runner.decode(seqs, std::span<const TokenId>(&current, 1), logits);
    stats.decode_seconds += seconds_since(t1);
    if (!st.ok()) break;
    ++stats.decode_steps;
  }
  runner.release(seq);
  if (!st.ok()) return st;
  return stats;
}

}  // namespace tessera::engine
