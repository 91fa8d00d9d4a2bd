// Status <-> HTTP: the one table that turns a Status code into the HTTP status every Tessera service
// answers with, and an HTTP status from a Tessera service back into a Status code. The table follows the
// gRPC/Abseil canon (google.rpc.Code's HTTP mapping) except that Cancelled is 503: on a node a request is
// cancelled by its server shutting down, which a client should retry elsewhere. The OpenAI error shape of a
// Status (its `type` and `code`) is api/openai.h's error_for().
//
// Thread-safety: pure functions.
#pragma once

#include <string>

#include "base/status.h"

namespace tessera::api {

// kOk 200; InvalidArgument, FailedPrecondition, OutOfRange 400; Unauthenticated 401; PermissionDenied 403;
// NotFound 404; AlreadyExists 409; ResourceExhausted 429; Unimplemented 501; Cancelled, Unavailable 503;
// DeadlineExceeded 504; DataLoss, Internal 500.
int http_status(StatusCode code);
inline int http_status(const Status& s) { return http_status(s.code()); }

// The reverse, for a non-2xx answer of a Tessera service (413 is ResourceExhausted too; anything the table
// does not produce is Internal, the message naming the HTTP status).
Status status_from_http(int http_status, std::string message);

}  // namespace tessera::api
