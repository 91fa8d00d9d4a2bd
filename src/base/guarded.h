// run_guarded: the last line of defence of a thread body. No exception may escape a thread (std::terminate
// would take the whole node down for one bad request), so every thread a module starts for requests runs its
// body through this: an exception is logged with `what` and `on_error` fails the one request the body was
// serving. It is not a substitute for validating input; it catches what validation missed.
//
// Thread-safety: stateless.
#pragma once

#include <exception>
#include <string>
#include <string_view>
#include <utility>

#include "base/log.h"

namespace tessera {

template <typename Body, typename OnError>
void run_guarded(std::string_view what, Body&& body, OnError&& on_error) noexcept {
  const char* why = nullptr;
  std::string message;
  try {
    std::forward<Body>(body)();
    return;
  } catch (const std::exception& e) {
    message = e.what();
    why = message.c_str();
  } catch (...) {
    why = "a non-standard exception";
  }
  try {
    log::error("{}: uncaught exception ({}); failing this request only", what, why);
    std::forward<OnError>(on_error)();
  } catch (...) {
    // Nothing more can be done for this request; the process stays up.
  }
}

template <typename Body>
void run_guarded(std::string_view what, Body&& body) noexcept {
  run_guarded(what, std::forward<Body>(body), [] {});
}

}  // namespace tessera
