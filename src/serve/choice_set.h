// ChoiceSet: the choices of one API call, answered together. A call has n choices per prompt (OpenAI's n) and,
// on /v1/completions, one or more prompts; choice `prompt * n + i` is the i-th choice of that prompt, the order
// OpenAI and vLLM give them. Each choice is generated and streamed on its own; the call's answer (the whole
// body, or a stream's usage chunk and [DONE]) is complete when its last choice ends. The first failure answers
// for the whole call, and the other choices are cancelled.
//
// Usage sums the completion tokens of every choice and counts each prompt once (its first choice reports it),
// as OpenAI and vLLM count them.
//
// Thread-safety: `mu` guards everything; the node server holds it while it handles an output (engine thread)
// and while it submits the call's requests.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/request_tag.h"

#include "engine/engine.h"

namespace tessera::serve {

class ChoiceSet {
 public:
  ChoiceSet(int prompts, int n) : n_(n), choices_(static_cast<size_t>(prompts * n)) {}

  std::mutex mu;

  int total() const { return static_cast<int>(choices_.size()); }
  int n() const { return n_; }
  // The call was answered (complete, failed or cancelled): outputs still arriving are dropped.
  bool over() const { return over_; }
  void set_over() { over_ = true; }
  // True the first time only: the call's time to first token is measured once.
  bool first_token() { return std::exchange(first_token_, false); }

  // Records a choice's last output and, when not streamed, its choice object. True when it was the last choice:
  // the call is complete (and over).
  bool finish_choice(int index, nlohmann::json choice, const engine::RequestOutput& last);
  // The usage object of the whole call (valid once complete).
  nlohmann::json usage() const;
  // The choice objects by index (non-streamed answers).
  nlohmann::json choices() const;

  // Cancels every engine request of the call (set by whoever submits them; may be empty).
  std::function<void()> cancel;
  // The call's id, trace and timing for its access line (may be null).
  std::shared_ptr<RequestTag> tag;

 private:
  int n_;
  std::vector<nlohmann::json> choices_;
  int done_ = 0;
  bool over_ = false;
  bool first_token_ = true;
  int64_t prompt_tokens_ = 0, completion_tokens_ = 0, cached_tokens_ = 0;
};

}  // namespace tessera::serve
