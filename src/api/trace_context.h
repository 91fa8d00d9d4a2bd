// Request ids and W3C trace context (https://www.w3.org/TR/trace-context/), the two things that let one request be
// followed through the router, the decode node and the prefill node (docs/operations.md "Logs").
//
//   x-request-id  the request's id: the client's when it sent one (at most 200 printable characters), else
//                 one the first Tessera process made; passed unchanged on every hop and printed on every log line
//                 about the request
//   traceparent   "00-<32 hex trace id>-<16 hex parent span id>-<2 hex flags>": the client's when valid, else a
//                 new trace; each hop sends a child (same trace id, a span id of its own)
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tessera::api {

inline constexpr std::string_view kRequestIdHeader = "x-request-id";
inline constexpr std::string_view kTraceparentHeader = "traceparent";

struct TraceContext {
  std::string trace_id;   // 32 lowercase hex digits, not all zero
  std::string parent_id;  // 16 lowercase hex digits, not all zero: the span of the hop that sent it
  std::string flags = "01";

  // A valid version-00 traceparent (or a later version's first four fields, as the spec asks); nullopt otherwise.
  static std::optional<TraceContext> parse(std::string_view header);
  // A new trace with a random trace id and span id.
  static TraceContext fresh();
  // The same trace with a new span id: what this hop sends on.
  TraceContext child() const;
  std::string header() const;
};

// The trace a request belongs to: its traceparent header when valid, else a new trace.
TraceContext trace_of(std::string_view traceparent_header);
// The request id a hop uses: the incoming one when it is usable (1..200 printable ASCII, no spaces), else a new
// one "PREFIX-<16 hex>".
std::string request_id_of(std::string_view incoming, std::string_view prefix);

}  // namespace tessera::api
