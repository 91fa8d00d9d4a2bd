// The reference backend: portable scalar C++ on host memory, one device ("ref:0").
//
// It is the oracle: every other backend is checked against it, and its arithmetic follows llama2.c's run.c
// operation for operation (same accumulation order, same libm calls) so greedy output matches run.c's
// byte for byte. It favours clarity over speed. Operators execute synchronously inside Stream::run.
#pragma once

#include <memory>

#include "base/status.h"
#include "ops/backend.h"

namespace tessera::ops::ref {

Result<std::unique_ptr<Backend>> create_backend();

}  // namespace tessera::ops::ref
