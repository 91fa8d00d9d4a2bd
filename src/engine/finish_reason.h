// Why a generation ended, shared by generate() and the Engine (names follow OpenAI's finish_reason).
#pragma once

#include <string_view>

namespace tessera::engine {

enum class FinishReason { kNone, kStop, kLength, kCancelled, kError };

// "stop", "length", "cancelled", "error" ("" for kNone). Running out of context is "length", as in OpenAI.
std::string_view finish_reason_name(FinishReason r);

}  // namespace tessera::engine
