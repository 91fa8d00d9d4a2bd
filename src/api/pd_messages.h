// The bodies of GET /internal/pd/info and POST /internal/pd/prefill as each side writes and reads them
// (docs/pd-protocol.md). Read as untrusted input: the other node may be buggy, compromised or not a Tessera node at
// all. Every field is checked for its type and range before anything is sized from it; a bad body is an InvalidArgument
// that names the field, never an exception. The decode node then falls back to prefilling locally; the prefill node
// answers 400.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/kv_layout.h"
#include "api/roles.h"
#include "api/sampling.h"
#include "api/structured_output.h"
#include "base/dtype.h"
#include "base/status.h"

namespace tessera::api {

// The log-probability of a first token the prefill node drew, and its `top` alternatives (most likely first), for a
// request that asked for logprobs: the decode node has no logits for that token, only what is sent here.
struct FirstTokenLogprobs {
  int32_t token = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
};

// A prefill node's 200 reply. The decode node reads first_token, checksum and the three phase times, and
// checks bytes and kv_dtype against what it reserved and asked for.
struct PrefillReply {
  int32_t first_token = 0;
  // n > 1: the first tokens of choices 1..n-1 (choice i drawn with the seed + i), from the same logits.
  std::vector<int32_t> choice_tokens;
  // With PrefillCall::logprobs >= 0: one per choice (choice 0 first), for the tokens above.
  std::vector<FirstTokenLogprobs> first_logprobs;
  uint64_t checksum = 0;
  double compute_ms = 0;
  double transfer_ms = 0;
  double transfer_wait_ms = 0;
  DType kv_dtype = DType::kF32;  // the wire type the KV was sent in: the call's
  // Written by the prefill node for people and older decode nodes:
  uint64_t bytes = 0;
  bool overlap = true;
  double prefill_ms = 0;
};
std::string prefill_reply_body(const PrefillReply& r);

// `expected_bytes`: the KV bytes the decode node reserved (a reply that says otherwise is refused); `expected_dtype`:
// the wire type it asked for (PrefillCall::kv_dtype; a reply without kv_dtype means f32);
// `vocab_size`: first_token must be a token of the decode node's model; `choices`: the n asked for (a reply
// must bring choices - 1 choice_tokens); `logprobs` >= 0: the reply must bring first_logprobs for every choice, each
// naming its choice's token, with at most `logprobs` alternatives.
Result<PrefillReply> parse_prefill_reply(std::string_view body, uint64_t expected_bytes, int vocab_size,
                                         int choices = 1, int logprobs = -1, DType expected_dtype = DType::kF32);

// What a prefill node takes from a decode node's request.
struct PrefillCall {
  std::vector<int32_t> prompt;
  int export_from = 0;  // first position whose KV is sent; leaves at least one token
  // The first position whose sliding-window layers' rows the decode node keeps (api::KvLayout version 3): those
  // layers' rows before it are not sent, and every row sent must be real, so a prefill node whose sliding layers keep
  // only their windows takes from its prefix cache only what they still hold rows of from here on. Absent (-1 here):
  // export_from, every row (a decode node that keeps every position, which its prefix cache may reuse).
  int window_from = -1;
  // The element type of the rows sent (api::kv_wire_dtype): the decode node's cache's, so an f16 cache's KV crosses
  // the link in half the bytes of f32. Absent from the body: f32.
  DType kv_dtype = DType::kF32;
  SamplingParams sampling;
  int n = 1;  // choices: this many first tokens are drawn (PrefillReply::choice_tokens)
  // What sampling.min_tokens masks on the first token: the request's stop_token_ids, and its end-of-generation
  // tokens unless ignore_eos (the prefill node's own list).
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  int logprobs = -1;  // the request's logprobs (-1: none): the reply carries the first tokens' (first_logprobs)
  StructuredOutput structured;  // the request's grammar: the prefill node samples the first token under it
  std::string agent;            // link::AgentInfo::encode() of the decode node
  std::string region;           // link::RegionDesc::encode() of its staging region
  uint64_t offset = 0;
  uint64_t tag = 0;
  nlohmann::json model;  // must equal the prefill node's model description
};

// `max_prompt_tokens`: the longest prompt this node accepts (its model's context).
Result<PrefillCall> parse_prefill_call(std::string_view body, int vocab_size, int max_prompt_tokens);
std::string prefill_call_body(const PrefillCall& c);

// GET /internal/pd/info: {"role", "agent": link::AgentInfo::encode(), "model": the model description}.
std::string pd_info_body(NodeRole role, const std::string& agent, const nlohmann::json& model);
// What the router takes from it: the role, and the host id inside the agent description ("host=H"), which
// tells it which nodes share a machine. InvalidArgument for a body without a known role.
struct PdInfo {
  std::string role;
  std::string host_id;
};
Result<PdInfo> parse_pd_info(std::string_view body);

}  // namespace tessera::api
