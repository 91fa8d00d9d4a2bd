// Continuing a stream that another node started: the node side of the router's decode migration
// (src/router/migration.h).
//
// Two extensions to the OpenAI wire format, used only between the router and the nodes:
// - Request header `x-tessera-token-ids: 1` on a streamed request: before every data chunk that reports new
//   tokens the node writes an SSE comment `: tessera-tokens ID,ID,...` (clients ignore comments; the router
//   strips them), and every output that carries tokens gets a data chunk even when its text is held back.
//   The router thus always knows which tokens the client has been sent (possibly with part of their text
//   still held back by the node).
// - Body field `tessera_resume` {"tokens": [...], "text_bytes": N, "preamble_sent": bool, "id": "...",
//   "created": T}: the tokens generated so far are appended to the prompt and counted against max_tokens;
//   the first N bytes of their text are already with the client (the rest is sent first); the role chunk and
//   echo are not repeated when the preamble was sent; the stream keeps the original id and created time;
//   usage reports the original prompt and every completion token. With greedy sampling the continuation is
//   token-exact.
//
// Part of tessera_api (the wire contract, no engine): the router uses it too. The node's text side is
// serve/resume_text.h.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/headers.h"  // kTokenIdsHeader
#include "base/status.h"

namespace tessera::api {

inline constexpr std::string_view kTokenComment = ": tessera-tokens ";

struct Resume {
  std::vector<int32_t> tokens;  // generated so far
  uint64_t text_bytes = 0;      // bytes of their text the client already has
  bool preamble_sent = false;   // role chunk (chat) / echo (completions) already sent
  std::string id;               // the stream's id, kept ("" when not known)
  int64_t created = 0;
};

// The body's tessera_resume; nullopt when absent; InvalidArgument when malformed or a token id is outside
// [0, vocab_size).
Result<std::optional<Resume>> parse_resume(std::string_view body, int vocab_size);

// True when `body` is a JSON object with a "tessera_resume" member (whatever its value): an internal field
// that only cluster members may send (docs/security.md).
bool has_resume_field(std::string_view body);

// ": tessera-tokens 1,2,3\n\n"
std::string token_comment(const std::vector<int32_t>& tokens);

}  // namespace tessera::api
