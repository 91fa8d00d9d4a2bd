// Copy-on-write fork of a sequence's KV cache, for the choices of one request (OpenAI's n): the prompt is
// computed once, then every other choice starts from the same cached positions.
//
// The full blocks are shared: each gets one more reference (BlockManager::retain) and is never written again
// by anyone (a sequence only appends, and appends land past its full blocks). The partial last block is the
// one the next token of every choice would write into, so it is copied: the fork gets a fresh block holding
// the same rows (one device copy per layer for K and one for V, through host memory in the cache's own type,
// so the bytes are identical).
//
// Engine thread only (it uses the runner's stream and the block manager).
#pragma once

#include "base/status.h"
#include "engine/kv_cache.h"
#include "engine/model_runner.h"

namespace tessera::engine {

// Makes `to` (empty) hold the same `from.length` positions as `from`. ResourceExhausted when no block is free
// for the copy of the partial block (`to` is then left empty, nothing retained).
Status fork_kv(ModelRunner& runner, const SequenceKv& from, SequenceKv& to);

}  // namespace tessera::engine
