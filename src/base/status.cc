#include "base/status.h"

namespace tessera {

std::string_view status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kCancelled:
      return "Cancelled";
    case StatusCode::kInvalidArgument:
      return "InvalidArgument";
    case StatusCode::kNotFound:
      return "NotFound";
    case StatusCode::kAlreadyExists:
      return "AlreadyExists";
    case StatusCode::kFailedPrecondition:
      return "FailedPrecondition";
    case StatusCode::kOutOfRange:
      return "OutOfRange";
    case StatusCode::kResourceExhausted:
      return "ResourceExhausted";
    case StatusCode::kUnavailable:
      return "Unavailable";
    case StatusCode::kDeadlineExceeded:
      return "DeadlineExceeded";
    case StatusCode::kUnimplemented:
      return "Unimplemented";
    case StatusCode::kDataLoss:
      return "DataLoss";
    case StatusCode::kInternal:
      return "Internal";
    case StatusCode::kPermissionDenied:
      return "PermissionDenied";
    case StatusCode::kUnauthenticated:
      return "Unauthenticated";
  }
  return "Unknown";
}

std::string Status::to_string() const {
  if (ok()) return "OK";
  std::string out(status_code_name(code_));
  out += ": ";
  out += message_;
  return out;
}

Status Status::with_context(std::string_view context) const {
  if (ok()) return *this;
  std::string msg(context);
  msg += ": ";
  msg += message_;
  return Status(code_, std::move(msg));
}

Status cancelled(std::string m) { return Status(StatusCode::kCancelled, std::move(m)); }
Status invalid_argument(std::string m) { return Status(StatusCode::kInvalidArgument, std::move(m)); }
Status not_found(std::string m) { return Status(StatusCode::kNotFound, std::move(m)); }
Status already_exists(std::string m) { return Status(StatusCode::kAlreadyExists, std::move(m)); }
Status failed_precondition(std::string m) { return Status(StatusCode::kFailedPrecondition, std::move(m)); }
Status out_of_range(std::string m) { return Status(StatusCode::kOutOfRange, std::move(m)); }
Status resource_exhausted(std::string m) { return Status(StatusCode::kResourceExhausted, std::move(m)); }
Status unavailable(std::string m) { return Status(StatusCode::kUnavailable, std::move(m)); }
Status deadline_exceeded(std::string m) { return Status(StatusCode::kDeadlineExceeded, std::move(m)); }
Status unimplemented(std::string m) { return Status(StatusCode::kUnimplemented, std::move(m)); }
Status data_loss(std::string m) { return Status(StatusCode::kDataLoss, std::move(m)); }
Status internal_error(std::string m) { return Status(StatusCode::kInternal, std::move(m)); }
Status permission_denied(std::string m) { return Status(StatusCode::kPermissionDenied, std::move(m)); }
Status unauthenticated(std::string m) { return Status(StatusCode::kUnauthenticated, std::move(m)); }

}  // namespace tessera
