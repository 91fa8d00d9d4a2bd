// A ResponseWriter that writes the request's access line (base/log.h) when the answer is complete: for routes whose
// handlers answer on many paths (POST /internal/pd/prefill), so that every path is logged once, with its status,
// without each one remembering to.
#pragma once

#include <memory>

#include "http/http.h"
#include "serve/request_tag.h"

namespace tessera::serve {

// `tag` names the request; its route, id and trace are printed, its start time gives the total.
std::shared_ptr<http::ResponseWriter> with_access_log(std::shared_ptr<http::ResponseWriter> inner,
                                                      std::shared_ptr<const RequestTag> tag);

// The tag of an incoming request: its x-request-id (or a new one with `prefix`) and traceparent (or a new trace).
std::shared_ptr<RequestTag> tag_of(const http::Request& r, std::string_view prefix);

}  // namespace tessera::serve
