#include "api/http_status.h"

#include <fmt/format.h>

namespace tessera::api {

int http_status(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return 200;
    case StatusCode::kInvalidArgument:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kOutOfRange:
      return 400;
    case StatusCode::kUnauthenticated:
      return 401;
    case StatusCode::kPermissionDenied:
      return 403;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kAlreadyExists:
      return 409;
    case StatusCode::kResourceExhausted:
      return 429;
    case StatusCode::kUnimplemented:
      return 501;
    case StatusCode::kCancelled:
    case StatusCode::kUnavailable:
      return 503;
    case StatusCode::kDeadlineExceeded:
      return 504;
    case StatusCode::kDataLoss:
    case StatusCode::kInternal:
      break;
  }
  return 500;
}

Status status_from_http(int status, std::string message) {
  switch (status) {
    case 400:
      return invalid_argument(std::move(message));
    case 401:
      return unauthenticated(std::move(message));
    case 403:
      return permission_denied(std::move(message));
    case 404:
      return not_found(std::move(message));
    case 409:
      return already_exists(std::move(message));
    case 413:
    case 429:
      return resource_exhausted(std::move(message));
    case 501:
      return unimplemented(std::move(message));
    case 503:
      return unavailable(std::move(message));
    case 504:
      return deadline_exceeded(std::move(message));
    default:
      return internal_error(fmt::format("HTTP {}: {}", status, message));
  }
}

}  // namespace tessera::api
