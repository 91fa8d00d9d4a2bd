// The bodies of POST /internal/pd/prefill as each side reads them (docs/pd-protocol.md), parsed as
// untrusted input: the other node may be buggy, compromised or not a Tessera node at all. Every field is
// checked for its type and range before anything is sized from it; a bad body is an InvalidArgument that
// names the field, never an exception. The decode node then falls back to prefilling locally; the prefill
// node answers 400.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "engine/sampler.h"
#include "model/tokenizer/tokenizer.h"

namespace tessera::serve {

// What a decode node takes from a prefill node's 200 reply.
struct PrefillReply {
  model::TokenId first_token = 0;
  uint64_t checksum = 0;
  double compute_ms = 0;
  double transfer_ms = 0;
  double transfer_wait_ms = 0;
};

// `expected_bytes`: the KV bytes the decode node reserved (a reply that says otherwise is refused);
// `vocab_size`: first_token must be a token of the decode node's model.
Result<PrefillReply> parse_prefill_reply(std::string_view body, uint64_t expected_bytes, int vocab_size);

// What a prefill node takes from a decode node's request.
struct PrefillCall {
  std::vector<model::TokenId> prompt;
  int export_from = 0;  // first position whose KV is sent; leaves at least one token
  engine::SamplingParams sampling;
  std::string agent;   // link::AgentInfo::encode() of the decode node
  std::string region;  // link::RegionDesc::encode() of its staging region
  uint64_t offset = 0;
  uint64_t tag = 0;
  nlohmann::json model;  // must equal the prefill node's model description
};

// `max_prompt_tokens`: the longest prompt this node accepts (its model's context).
Result<PrefillCall> parse_prefill_call(std::string_view body, int vocab_size, int max_prompt_tokens);

// The sampling object both sides exchange.
nlohmann::json sampling_to_json(const engine::SamplingParams& s);
Result<engine::SamplingParams> sampling_from_json(const nlohmann::json& j);

}  // namespace tessera::serve
