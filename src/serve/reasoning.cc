#include "serve/reasoning.h"

#include <algorithm>
#include <array>

#include <fmt/format.h>

namespace tessera::serve {
namespace {

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kStart = "<|start|>";
constexpr std::string_view kChannel = "<|channel|>";
constexpr std::string_view kMessage = "<|message|>";
constexpr std::string_view kRecipient = " to=";
constexpr std::array<std::string_view, 3> kMessageEnds = {"<|end|>", "<|return|>", "<|call|>"};

// The longest proper suffix of `s` that is a prefix of `tag`: bytes that may become the tag.
size_t partial_suffix(std::string_view s, std::string_view tag) {
  for (size_t k = std::min(s.size(), tag.size() - 1); k > 0; --k) {
    if (s.substr(s.size() - k) == tag.substr(0, k)) return k;
  }
  return 0;
}

bool is_prefix_of(std::string_view s, std::string_view tag) { return s.size() < tag.size() && tag.starts_with(s); }

bool opens_think(std::string_view prompt) {
  const size_t open = prompt.rfind(kThinkOpen);
  if (open == std::string_view::npos) return false;
  const size_t close = prompt.rfind(kThinkClose);
  return close == std::string_view::npos || close < open;
}

}  // namespace

std::string_view reasoning_format_name(ReasoningFormat f) {
  switch (f) {
    case ReasoningFormat::kNone:
      return "none";
    case ReasoningFormat::kQwen3:
      return "qwen3";
    case ReasoningFormat::kDeepSeekR1:
      return "deepseek_r1";
    case ReasoningFormat::kGptOss:
      return "gpt_oss";
  }
  return "?";
}

std::vector<std::string> reasoning_format_names() { return {"qwen3", "deepseek_r1", "gpt_oss", "none"}; }

Result<ReasoningFormat> reasoning_format_from_name(std::string_view name) {
  for (ReasoningFormat f :
       {ReasoningFormat::kNone, ReasoningFormat::kQwen3, ReasoningFormat::kDeepSeekR1, ReasoningFormat::kGptOss}) {
    if (reasoning_format_name(f) == name) return f;
  }
  return invalid_argument(
      fmt::format("unknown reasoning parser '{}'; known: {}", name, fmt::join(reasoning_format_names(), ", ")));
}

ReasoningFormat detect_reasoning_format(std::string_view t) {
  if (t.find(kChannel) != std::string_view::npos && t.find(kMessage) != std::string_view::npos)
    return ReasoningFormat::kGptOss;
  if (t.find(kThinkOpen) == std::string_view::npos) return ReasoningFormat::kNone;
  // DeepSeek's role markers are written with full-width bars.
  if (t.find("\xEF\xBD\x9C"
             "Assistant"
             "\xEF\xBD\x9C") != std::string_view::npos)
    return ReasoningFormat::kDeepSeekR1;
  return ReasoningFormat::kQwen3;
}

Result<ReasoningFormat> choose_reasoning_format(std::string_view flag, std::string_view template_source) {
  if (flag.empty()) return detect_reasoning_format(template_source);
  return reasoning_format_from_name(flag);
}

ReasoningParser::ReasoningParser(ReasoningFormat format, std::string_view prompt) : format_(format) {
  reasoning_first_ =
      format == ReasoningFormat::kDeepSeekR1 || (format == ReasoningFormat::kQwen3 && opens_think(prompt));
  if (format == ReasoningFormat::kNone) state_ = State::kContent;
}

ReasoningDelta ReasoningParser::feed(std::string_view text) {
  buf_.append(text);
  ReasoningDelta out;
  run(out, false);
  return out;
}

ReasoningDelta ReasoningParser::finish() {
  ReasoningDelta out;
  run(out, true);
  return out;
}

void ReasoningParser::run(ReasoningDelta& out, bool final) {
  if (format_ == ReasoningFormat::kGptOss) return run_harmony(out, final);
  run_think(out, final);
}

void ReasoningParser::run_think(ReasoningDelta& out, bool final) {
  for (;;) {
    switch (state_) {
      case State::kStart: {
        const size_t ws = buf_.find_first_not_of(" \t\r\n");
        const std::string_view rest = ws == std::string::npos ? std::string_view() : std::string_view(buf_).substr(ws);
        if (rest.starts_with(kThinkOpen)) {
          buf_.erase(0, ws + kThinkOpen.size());
          state_ = State::kReasoning;
          continue;
        }
        if (!final && (rest.empty() || is_prefix_of(rest, kThinkOpen))) return;  // not known yet
        state_ = reasoning_first_ ? State::kReasoning : State::kContent;
        continue;
      }
      case State::kReasoning: {
        const size_t at = buf_.find(kThinkClose);
        if (at != std::string::npos) {
          out.reasoning.append(buf_, 0, at);
          buf_.erase(0, at + kThinkClose.size());
          state_ = State::kContent;
          continue;
        }
        const size_t keep = final ? 0 : partial_suffix(buf_, kThinkClose);
        out.reasoning.append(buf_, 0, buf_.size() - keep);
        buf_.erase(0, buf_.size() - keep);
        return;
      }
      default:
        out.content += buf_;
        buf_.clear();
        return;
    }
  }
}

void ReasoningParser::run_harmony(ReasoningDelta& out, bool final) {
  for (;;) {
    switch (state_) {
      case State::kStart: {
        // Between messages: the next one opens with <|start|> (or, first of all, with <|channel|>, the prompt
        // having written <|start|>assistant).
        // A first message may also continue the prompt's role with its recipient (` to=functions.f<|channel|>...`).
        if (buf_.starts_with(kStart) || buf_.starts_with(kChannel) || buf_.starts_with(kRecipient)) {
          state_ = State::kHeader;
          continue;
        }
        if (!final && (buf_.empty() || is_prefix_of(buf_, kStart) || is_prefix_of(buf_, kChannel) ||
                       is_prefix_of(buf_, kRecipient)))
          return;
        state_ = State::kContent;  // not harmony: the text as it is
        continue;
      }
      case State::kHeader: {
        const size_t at = buf_.find(kMessage);
        if (at == std::string::npos) {
          if (final) buf_.clear();  // cut off inside a header: nothing of it is text
          return;
        }
        header_ = buf_.substr(0, at);
        buf_.erase(0, at + kMessage.size());
        channel_.clear();
        if (const size_t c = header_.find(kChannel); c != std::string::npos) {
          const size_t from = c + kChannel.size();
          const size_t to = header_.find_first_of(" <", from);
          channel_ = header_.substr(from, to == std::string::npos ? std::string::npos : to - from);
        }
        if (channel_ != "analysis" && channel_ != "final" && !channel_.empty()) {
          out.content += header_;  // commentary and the rest: verbatim, for a tool-call parser
          out.content += kMessage;
        }
        state_ = State::kBody;
        continue;
      }
      case State::kBody: {
        size_t at = std::string::npos, len = 0;
        for (std::string_view end : kMessageEnds) {
          const size_t p = buf_.find(end);
          if (p < at) {
            at = p;
            len = end.size();
          }
        }
        const bool raw = channel_ != "analysis" && channel_ != "final" && !channel_.empty();
        std::string& sink = channel_ == "analysis" ? out.reasoning : out.content;
        if (at != std::string::npos) {
          sink.append(buf_, 0, raw ? at + len : at);
          buf_.erase(0, at + len);
          state_ = State::kStart;
          continue;
        }
        size_t keep = 0;
        if (!final) {
          for (std::string_view end : kMessageEnds) keep = std::max(keep, partial_suffix(buf_, end));
        }
        sink.append(buf_, 0, buf_.size() - keep);
        buf_.erase(0, buf_.size() - keep);
        return;
      }
      default:
        out.content += buf_;
        buf_.clear();
        return;
    }
  }
}

ReasoningDelta split_reasoning(ReasoningFormat format, std::string_view prompt, std::string_view text) {
  ReasoningParser p(format, prompt);
  ReasoningDelta out = p.feed(text);
  ReasoningDelta rest = p.finish();
  out.reasoning += rest.reasoning;
  out.content += rest.content;
  return out;
}

}  // namespace tessera::serve
