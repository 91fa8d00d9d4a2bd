#include "router/migration.h"

#include <charconv>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "api/resume.h"
#include "base/log.h"

namespace tessera::router {
namespace {

using json = nlohmann::json;

bool parse_ids(std::string_view s, std::vector<int32_t>& out) {
  while (!s.empty()) {
    size_t comma = s.find(',');
    std::string_view one = s.substr(0, comma);
    int32_t v = 0;
    auto [p, ec] = std::from_chars(one.data(), one.data() + one.size(), v);
    if (ec != std::errc() || p != one.data() + one.size() || v < 0) return false;
    out.push_back(v);
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }
  return true;
}

}  // namespace

std::string StreamTracker::feed(std::string_view piece) {
  buffer_.append(piece.data(), piece.size());
  std::string out;
  size_t start = 0;
  for (size_t end = buffer_.find("\n\n"); end != std::string::npos; end = buffer_.find("\n\n", start)) {
    event(std::string_view(buffer_).substr(start, end - start), out);
    start = end + 2;
  }
  buffer_.erase(0, start);
  return out;
}

void StreamTracker::event(std::string_view ev, std::string& out) {
  const std::string_view comment = api::kTokenComment;
  if (ev.substr(0, comment.size()) == comment) {
    std::vector<int32_t> ids;
    if (parse_ids(ev.substr(comment.size()), ids)) tentative_.insert(tentative_.end(), ids.begin(), ids.end());
    return;  // ours: never forwarded
  }
  const size_t at = out.size();  // where this event starts in `out` (its comment goes before it)
  out.append(ev.data(), ev.size());
  out += "\n\n";
  constexpr std::string_view kData = "data: ";
  if (ev.substr(0, kData.size()) != kData) return;
  std::string_view payload = ev.substr(kData.size());
  if (payload == "[DONE]") {
    done_ = true;
    return;
  }
  json j = json::parse(payload, nullptr, false);
  if (!j.is_object()) return;
  if (j.contains("error")) {
    failed_ = true;
    return;
  }
  if (j.contains("usage") && j["usage"].is_object()) usage_seen_ = true;
  if (id_.empty() && j.contains("id") && j["id"].is_string()) id_ = j["id"].get<std::string>();
  if (created_ == 0 && j.contains("created") && j["created"].is_number_integer())
    created_ = j["created"].get<int64_t>();
  if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return;  // the usage chunk
  const json& choice = j["choices"][0];
  std::string_view text;
  if (choice.contains("delta") && choice["delta"].is_object()) {
    const json& d = choice["delta"];
    if (d.contains("content") && d["content"].is_string()) text = d["content"].get_ref<const std::string&>();
  } else if (choice.contains("text") && choice["text"].is_string()) {
    text = choice["text"].get_ref<const std::string&>();
  }
  const bool committed = !tentative_.empty() || !tokens_.empty();
  if (!tentative_.empty()) {
    if (forward_ids_) out.insert(at, api::token_comment(tentative_));
    tokens_.insert(tokens_.end(), tentative_.begin(), tentative_.end());
    tentative_.clear();
  }
  if (committed) {
    text_bytes_ += text.size();
  } else if (!text.empty() && preamble_sent_) {
    text_without_ids_ = true;  // content with no token ids: this node does not report them
  }
  preamble_sent_ = true;  // the role chunk or echo comes first, then content
  if (choice.contains("finish_reason") && !choice["finish_reason"].is_null()) {
    finished_choices_.insert(
        choice.contains("index") && choice["index"].is_number_integer() ? choice["index"].get<int64_t>() : 0);
    finished_ = static_cast<int>(finished_choices_.size()) >= choices_;
  }
}

bool StreamTracker::resumable() const { return choices_ == 1 && !done_ && !failed_ && !text_without_ids_; }

Result<std::string> StreamTracker::resume_body(std::string_view original_body) const {
  json j = json::parse(original_body, nullptr, false);
  if (!j.is_object()) return invalid_argument("the request body is not a JSON object");
  j["tessera_resume"] = {{"tokens", tokens_},
                         {"text_bytes", text_bytes_},
                         {"preamble_sent", preamble_sent_},
                         {"id", id_},
                         {"created", created_}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

Status migrate_stream(StreamTracker& tracker, std::string_view original_body, std::set<std::string>& tried,
                      int max_attempts, const MigrationHooks& hooks) {
  Status last = unavailable("no other node to continue the stream on");
  for (int attempt = 0; attempt < max_attempts; ++attempt) {
    if (tracker.done()) return ok_status();
    if (tracker.finished()) {  // only [DONE], or the usage chunk and [DONE], were missing
      if (tracker.usage_missing()) return unavailable("the node failed after the last token, before its usage chunk");
      hooks.write("data: [DONE]\n\n");
      return ok_status();
    }
    if (!tracker.resumable() || hooks.client_gone()) return last;
    const std::string url = hooks.pick(tried);
    if (url.empty()) return last;
    tried.insert(url);
    TS_ASSIGN_OR_RETURN(std::string body, tracker.resume_body(original_body));
    log::warn("router: continuing a broken stream on {} after {} tokens", url, tracker.tokens());
    Status s = hooks.exchange(url, body, [&](std::string_view piece) {
      std::string out = tracker.feed(piece);
      return out.empty() || hooks.write(out);
    });
    if (tracker.done()) return ok_status();
    last = s.ok() ? unavailable(fmt::format("{} ended the continued stream early", url)) : s;
  }
  return last;
}

}  // namespace tessera::router
