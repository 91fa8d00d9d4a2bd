// mistral: Mistral 7B v0.3, Nemo, Small, Devstral, Ministral. `[TOOL_CALLS]` (a control token: spelled for this
// parser) opens the calls, in one of two forms:
//   [TOOL_CALLS][{"name": "f", "arguments": {...}, "id": "abc123XYZ"}, ...]   (v3 tokenizers: Nemo)
//   [TOOL_CALLS]f[CALL_ID]abc123XYZ[ARGS]{...}[TOOL_CALLS]g[ARGS]{...}         (v7+ tokenizers; the id optional)
// An id the model wrote is the call's id; otherwise one is made of 9 letters and digits, the form Mistral's
// templates require when the call comes back in the conversation.
#include "serve/tool_parsers/builtin.h"

namespace tessera::serve {
namespace {

constexpr std::string_view kCalls = "[TOOL_CALLS]", kArgs = "[ARGS]", kCallId = "[CALL_ID]";
using Step = JsonScanner::Step;

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
}

class MistralParser final : public JsonCallParser {
 public:
  using JsonCallParser::JsonCallParser;

 private:
  enum class State : uint8_t { kText, kAfterMarker, kName, kId, kArgs, kElementStart, kElement, kAfterElement };

  // Not a call after all: the marker and what was read since are content.
  void not_a_call() {
    content(marker_);
    marker_.clear();
    state_ = State::kText;
  }

  void parse(bool final) override {
    for (;;) {
      switch (state_) {
        case State::kText: {
          const size_t at = buf_.find(kCalls);
          if (at != std::string::npos) {
            const std::string_view before = std::string_view(buf_).substr(0, at);
            const size_t end = before.find_last_not_of(" \t\r\n");
            const size_t keep = end == std::string_view::npos ? 0 : end + 1;
            content(before.substr(0, keep));
            marker_ = buf_.substr(keep, at + kCalls.size() - keep);  // the whitespace goes with the call
            buf_.erase(0, at + kCalls.size());
            state_ = State::kAfterMarker;
            continue;
          }
          if (final) {
            if (completed_calls() > 0 && buf_.find_first_not_of(" \t\r\n") == std::string::npos) buf_.clear();
            return content(std::exchange(buf_, {}));
          }
          const size_t end = buf_.size() - partial_suffix(buf_, kCalls);
          const size_t last = end == 0 ? std::string::npos : buf_.find_last_not_of(" \t\r\n", end - 1);
          const size_t release = last == std::string::npos ? 0 : last + 1;
          content(std::string_view(buf_).substr(0, release));
          buf_.erase(0, release);
          return;
        }
        case State::kAfterMarker: {
          const size_t b = buf_.find_first_not_of(" \t\r\n");
          if (b == std::string::npos) {
            if (final) {
              marker_ += std::exchange(buf_, {});
              not_a_call();
            }
            return;
          }
          marker_ += buf_.substr(0, b);
          buf_.erase(0, b);
          if (buf_[0] == '[') {
            marker_ += '[';
            buf_.erase(0, 1);
            state_ = State::kElementStart;
          } else {
            state_ = State::kName;
          }
          continue;
        }
        case State::kName: {
          size_t i = 0;
          while (i < buf_.size() && name_char(buf_[i])) ++i;
          if (i == buf_.size()) {
            if (!final) return;
            marker_ += std::exchange(buf_, {});
            not_a_call();
            continue;
          }
          const std::string_view rest = std::string_view(buf_).substr(i);
          const bool args = rest.starts_with(kArgs), id = rest.starts_with(kCallId);
          if (i > 0 && (args || id)) {
            name_ = buf_.substr(0, i);
            id_.clear();
            marker_ += buf_.substr(0, i + (args ? kArgs : kCallId).size());
            buf_.erase(0, i + (args ? kArgs : kCallId).size());
            if (args) {
              begin_args_call(std::exchange(marker_, {}), name_);
              state_ = State::kArgs;
            } else {
              state_ = State::kId;
            }
            continue;
          }
          if (i > 0 && !final && (is_partial(rest, kArgs) || is_partial(rest, kCallId))) return;
          marker_ += buf_.substr(0, i);
          buf_.erase(0, i);
          not_a_call();
          continue;
        }
        case State::kId: {
          const size_t at = buf_.find(kArgs);
          if (at == std::string::npos) {
            if (final || buf_.size() > 64 + kArgs.size()) {  // ids are short
              marker_ += std::exchange(buf_, {});
              not_a_call();
              continue;
            }
            return;
          }
          id_ = buf_.substr(0, at);
          marker_ += buf_.substr(0, at + kArgs.size());
          buf_.erase(0, at + kArgs.size());
          begin_args_call(std::exchange(marker_, {}), name_, id_);
          state_ = State::kArgs;
          continue;
        }
        case State::kArgs: {
          size_t i = 0;
          Step s = Step::kMore;
          while (i < buf_.size() && s == Step::kMore) s = args_byte(buf_[i++]);
          buf_.erase(0, i);
          if (s == Step::kMore) {
            if (final) break_call();
            return;
          }
          state_ = State::kText;  // the next [TOOL_CALLS], or content
          continue;
        }
        case State::kElementStart: {
          const size_t b = buf_.find_first_not_of(" \t\r\n");
          if (b == std::string::npos) {
            if (final) {
              marker_ += std::exchange(buf_, {});
              not_a_call();
            }
            return;
          }
          marker_ += buf_.substr(0, b);
          buf_.erase(0, b);
          begin_object_call(std::exchange(marker_, {}));
          state_ = State::kElement;
          continue;
        }
        case State::kElement: {
          size_t i = 0;
          Step s = Step::kMore;
          while (i < buf_.size() && s == Step::kMore) s = object_byte(buf_[i++]);
          buf_.erase(0, i);
          if (s == Step::kMore) {
            if (final) break_call();
            return;
          }
          state_ = s == Step::kError ? State::kText : State::kAfterElement;
          continue;
        }
        case State::kAfterElement: {
          const size_t b = buf_.find_first_not_of(" \t\r\n");
          if (b == std::string::npos) {
            if (final) buf_.clear();
            return;
          }
          if (buf_[b] == ',') {
            marker_ = buf_.substr(0, b + 1);
            buf_.erase(0, b + 1);
            state_ = State::kElementStart;
          } else {
            if (buf_[b] == ']') buf_.erase(0, b + 1);
            state_ = State::kText;
          }
          continue;
        }
      }
    }
  }

  State state_ = State::kText;
  std::string marker_;  // the text read since the marker, before the call could start
  std::string name_, id_;
};

}  // namespace

ToolParserPlugin mistral_tool_parser() {
  ToolParserPlugin p;
  p.create = [](ToolParserContext c) { return std::make_unique<MistralParser>(std::move(c)); };
  p.detect = [](std::string_view t) { return t.find(kCalls) != std::string_view::npos; };
  p.reads_special_tokens = true;
  p.id_chars = 9;
  return p;
}

}  // namespace tessera::serve
