// Status and Result<T>: how every recoverable failure in Tessera is reported.
//
// A Status carries one of a small set of standard codes (the Abseil/gRPC canon) and a message written for
// the person who has to act on it ("checkpoint model.bin is truncated: expected 1056540 bytes, found 4096").
// Result<T> holds either a value or a non-OK Status. Neither throws; both are cheap to move. Broken
// invariants (programmer errors) are not Statuses: they abort through TS_CHECK.
//
// Thread-safety: values; no shared state.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace tessera {

enum class StatusCode : int {
  kOk = 0,
  kCancelled,
  kInvalidArgument,
  kNotFound,
  kAlreadyExists,
  kFailedPrecondition,
  kOutOfRange,
  kResourceExhausted,
  kUnavailable,
  kDeadlineExceeded,
  kUnimplemented,
  kDataLoss,
  kInternal,
  kPermissionDenied,  // the caller is known but not allowed (wrong credential)
  kUnauthenticated,   // the caller presented no valid credential
};

// "InvalidArgument", "NotFound", ...
std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "NotFound: no such file: x.bin" (or "OK").
  std::string to_string() const;

  // Returns a copy whose message is "context: message"; OK stays OK.
  Status with_context(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status ok_status() { return Status(); }
Status cancelled(std::string message);
Status invalid_argument(std::string message);
Status not_found(std::string message);
Status already_exists(std::string message);
Status failed_precondition(std::string message);
Status out_of_range(std::string message);
Status resource_exhausted(std::string message);
Status unavailable(std::string message);
Status deadline_exceeded(std::string message);
Status unimplemented(std::string message);
Status data_loss(std::string message);
Status internal_error(std::string message);
Status permission_denied(std::string message);
Status unauthenticated(std::string message);

// Either a T or a non-OK Status. Accessing the value of an error Result aborts (a broken invariant).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(v_).ok()) {
      std::fprintf(stderr, "FATAL: Result constructed from an OK Status\n");
      std::abort();
    }
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return checked(); }
  const T& value() const& { return const_cast<Result*>(this)->checked(); }
  T&& value() && { return std::move(checked()); }
  T* operator->() { return &checked(); }
  const T* operator->() const { return &const_cast<Result*>(this)->checked(); }
  T& operator*() & { return checked(); }
  const T& operator*() const& { return const_cast<Result*>(this)->checked(); }

 private:
  T& checked() {
    if (!ok()) {
      std::fprintf(stderr, "FATAL: value() of an error Result: %s\n", std::get<Status>(v_).to_string().c_str());
      std::abort();
    }
    return std::get<T>(v_);
  }
  std::variant<T, Status> v_;
};

}  // namespace tessera

#define TS_CONCAT_INNER_(a, b) a##b
#define TS_CONCAT_(a, b) TS_CONCAT_INNER_(a, b)

// Returns the Status from the enclosing function if `expr` (a Status) is not OK.
#define TS_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::tessera::Status ts_status_ = (expr);   \
    if (!ts_status_.ok()) return ts_status_; \
  } while (0)

// `TS_ASSIGN_OR_RETURN(auto x, make_x());` declares x from a Result, or returns its Status.
#define TS_ASSIGN_OR_RETURN(lhs, expr) TS_ASSIGN_OR_RETURN_IMPL_(TS_CONCAT_(ts_result_, __LINE__), lhs, expr)
// NOLINTNEXTLINE(bugprone-macro-parentheses): lhs is a declaration, it cannot be parenthesised
#define TS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
