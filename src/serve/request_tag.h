// What a node's log says about one request (base/log.h): its id (x-request-id, the router's or this node's), its
// W3C trace, the route, the client's address and when it arrived; the time to its first token once known. One per
// API call, shared by its choices (ChoiceSet::tag); the access line is written when the call ends.
#pragma once

#include <chrono>
#include <string>

#include "api/trace_context.h"
#include "base/log.h"

namespace tessera::serve {

struct RequestTag {
  std::string request_id;
  api::TraceContext trace;
  std::string route;
  std::string remote;
  std::string model;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  double ttft_ms = -1;  // set once, under the ChoiceSet's lock

  log::Fields fields() const { return {request_id, trace.trace_id}; }
  double elapsed_ms() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  }
};

}  // namespace tessera::serve
