// Decode migration: a streamed answer whose node dies mid-stream continues on another node, and the client
// sees one unbroken stream with no token lost or repeated (token-exact for greedy sampling).
//
// The router asks every node for token ids (`x-tessera-token-ids: 1`, api/resume.h). A StreamTracker sits
// on the forwarded bytes: it removes the token-id comments, forwards complete SSE events only, and remembers
// the tokens whose data chunk reached the client, how many bytes of text they carried, whether the preamble
// (role chunk / echo) went out, and the stream's id. When the upstream breaks before [DONE],
// migrate_stream() sends the original body plus `tessera_resume` (those tokens, that byte count) to another
// node, which appends the tokens to the prompt, counts them against max_tokens and continues the stream.
//
// A client that sends `x-tessera-token-ids: 1` itself gets the comments of the tokens it was sent.
//
// A stream cannot migrate after an error event, or when text was forwarded without token ids (a node that
// does not speak the extension); it then ends with an SSE error event as before.
//
// Thread-safety: a StreamTracker belongs to one proxied call (one thread at a time).
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace tessera::router {

class StreamTracker {
 public:
  // forward_ids: the client asked for token ids itself (a load driver counting tokens): each committed
  // token-id comment is forwarded just before its data event. choices: how many choices the stream carries
  // (n times the prompts); a stream of several is finished only when each one's finish_reason went through,
  // and is never resumable (a node continues one choice). usage_expected: the client asked for the usage chunk
  // (stream_options.include_usage).
  explicit StreamTracker(bool forward_ids = false, int choices = 1, bool usage_expected = false)
      : forward_ids_(forward_ids), choices_(choices), usage_expected_(usage_expected) {}

  // Takes bytes from the upstream; returns the complete events to forward (token-id comments removed).
  std::string feed(std::string_view piece);
  bool done() const { return done_; }          // [DONE] went through
  bool finished() const { return finished_; }  // an event with a finish_reason went through
  bool failed() const { return failed_; }      // an error event went through
  // The client asked for the usage chunk and it has not gone through (a stream cut after its finish_reason).
  bool usage_missing() const { return usage_expected_ && !usage_seen_; }
  bool resumable() const;
  size_t tokens() const { return tokens_.size(); }
  // Bytes after the last complete event (forwarded as they are when a stream ends normally).
  std::string take_rest() { return std::exchange(buffer_, std::string()); }
  // The original request body with `tessera_resume` added (InvalidArgument if the body is not JSON).
  Result<std::string> resume_body(std::string_view original_body) const;

 private:
  void event(std::string_view ev, std::string& out);

  bool forward_ids_ = false;
  int choices_ = 1;
  std::set<int64_t> finished_choices_;
  std::string buffer_;
  std::vector<int32_t> tentative_;  // from the last comment, committed with the next data event
  std::vector<int32_t> tokens_;     // tokens whose data chunk was forwarded
  uint64_t text_bytes_ = 0;         // text forwarded after the preamble
  bool preamble_sent_ = false;
  bool text_without_ids_ = false;
  bool done_ = false, finished_ = false, failed_ = false;
  bool usage_expected_ = false, usage_seen_ = false;
  std::string id_;
  int64_t created_ = 0;
};

struct MigrationHooks {
  // A node not in `tried`, or "" when none is left.
  std::function<std::string(const std::set<std::string>& tried)> pick;
  // One upstream exchange: POST `body` to `url` asking for token ids; the answer's body goes to on_chunk
  // (only when the node answered 200). OK when the answer ended normally.
  std::function<Status(const std::string& url, const std::string& body,
                       const std::function<bool(std::string_view)>& on_chunk)>
      exchange;
  // Writes to the client; false when the client is gone.
  std::function<bool(const std::string&)> write;
  std::function<bool()> client_gone;
};

// Continues the tracked stream on other nodes (at most `max_attempts`), adding each one to `tried`.
// OK once the client has the whole stream ([DONE] forwarded, or written here after a finish_reason when no usage
// chunk was asked for or it went through); otherwise the last error (the caller then ends the stream with an error
// event). A stream cut between its finish_reason and the usage chunk the client asked for fails: no node can say the
// usage of a generation it did not run, and [DONE] without it would pass for a stream without usage.
Status migrate_stream(StreamTracker& tracker, std::string_view original_body, std::set<std::string>& tried,
                      int max_attempts, const MigrationHooks& hooks);

}  // namespace tessera::router
