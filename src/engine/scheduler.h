// Scheduler: continuous batching with chunked prefill, as a deterministic library.
//
// Each step has a token budget. Running sequences come first, oldest first: decodes (one token each),
// then prompt chunks of sequences still prefilling. Waiting sequences are then admitted strictly in
// arrival order (a request never overtakes an older one, so none starves) while budget, sequence slots and
// KV blocks last; admission first looks the prompt up in the prefix cache. When a running sequence needs a
// block and none is free, the newest running sequence is preempted: its blocks are released and it returns
// to the front of the waiting queue to be recomputed later.
//
// KV from outside the device cache (engine/kv_connector.h) enters at admission through ExternalKv: after the
// prefix cache, the positions it can supply are allocated with the rest. Supplied positions that take time to
// arrive (async) park the sequence in a loading list, holding its blocks, until finish_loading(); it then joins
// the running set directly (like a sequence that was running: max_running limits admissions, not loads ending).
//
// Values in, values out: the scheduler owns the queues and allocates blocks from the BlockManager, but
// never touches a device or a clock. Engine thread only.
#pragma once

#include <array>
#include <deque>
#include <memory>
#include <vector>

#include "base/status.h"
#include "engine/kv_cache.h"
#include "engine/sequence.h"

namespace tessera::engine {

struct SchedulerOptions {
  int max_batch_tokens = 256;  // token budget per step
  int max_running = 64;        // sequences in the running set
  int max_waiting = 1024;      // queue limit; beyond it submissions are refused
  // Sequences given work in one step (0: only the token budget limits them). The running set can outgrow
  // max_running through add_running (KV imported from a prefill node), and a step must not sample more
  // sequences than the runner has logit rows (RunnerOptions::max_logit_rows): the rest wait a step.
  int max_step_sequences = 0;
};

struct ScheduledChunk {
  Sequence* seq;
  int num_tokens;  // tokens [seq->kv.length, seq->kv.length + num_tokens) are computed this step
  // A hybrid model's state checkpoints (KvCache) due in this chunk, in position order: where the prompt parted from
  // the cached blocks at admission (Sequence::state_branch), the last block boundary at or before the request's hint
  // (Sequence::state_hint) and the prompt's last block boundary before its last token, each kept under the chain hash
  // of the block ending there; past that, the last block boundary the chunk crosses (a running checkpoint, with the
  // prompt's end's hash: KvCache::running_checkpoint_buffer).
  struct StateAt {
    int position = 0;
    BlockHash hash = 0;
    bool running = false;
    BlockHash prompt_end = 0;
  };
  std::array<StateAt, kMaxStepCheckpoints> states{};
  int num_states = 0;
};

struct Schedule {
  std::vector<ScheduledChunk> chunks;
  std::vector<Sequence*> preempted;  // moved back to waiting during this step
  std::vector<Sequence*> rejected;   // can never fit the cache: the caller fails them
  bool empty() const { return chunks.empty(); }
};

// What the scheduler asks beyond the prefix cache (the engine, for its KV connectors).
class ExternalKv {
 public:
  virtual ~ExternalKv() = default;
  struct Match {
    int tokens = 0;      // positions from seq.kv.length on that can be supplied from outside
    bool async = false;  // they take time: the sequence waits in the loading list until finish_loading()
  };
  // At admission, after the prefix cache supplied seq.kv.length positions. Asked again when the blocks could
  // not be allocated this time.
  virtual Match match(Sequence& seq) = 0;
  // The blocks for the matched positions (and, unless async, this step's chunk) are in seq.kv.blocks;
  // `local`: the positions the prefix cache supplied.
  virtual void allocated(Sequence& seq, int local) = 0;
};

class Scheduler {
 public:
  Scheduler(KvCache& kv, SchedulerOptions options);

  void set_external(ExternalKv* external) { external_ = external; }
  // An async load of a sequence in the loading list ended: it now holds `valid` positions and joins the running
  // set (what it still lacks is computed by later steps).
  void finish_loading(Sequence* seq, int valid);

  // ResourceExhausted when the waiting queue is full.
  Status add(Sequence* seq);
  // A sequence whose KV is already in its reserved blocks (imported from a prefill node) joins the running
  // set directly.
  void add_running(Sequence* seq);
  // Removes a sequence from whichever queue (or the loading list) holds it and releases its blocks.
  void remove(Sequence* seq);

  Schedule schedule();
  // After the step ran: registers newly filled blocks in the prefix cache (not an uncached sequence's), then gives
  // back the sliding layers' blocks that have left each sequence's window (KvCache::trim_window).
  void commit(const Schedule& schedule);

  int waiting() const { return static_cast<int>(waiting_.size()); }
  int running() const { return static_cast<int>(running_.size()); }
  int loading() const { return static_cast<int>(loading_.size()); }
  const SchedulerOptions& options() const { return options_; }

 private:
  // Grows seq's blocks to hold `length` positions, preempting newer running sequences when needed.
  // False when even that cannot make room (seq itself is then preempted if it was running).
  bool reserve_with_preemption(Sequence* seq, int length, Schedule& out);
  void preempt(Sequence* victim, Schedule& out);
  // The chunk, with the state checkpoints due in it (ScheduledChunk::states).
  ScheduledChunk chunk(Sequence* seq, int num_tokens) const;
  void release_blocks(Sequence* seq);

  KvCache& kv_;
  SchedulerOptions options_;
  ExternalKv* external_ = nullptr;
  std::deque<Sequence*> waiting_;   // arrival order
  std::vector<Sequence*> running_;  // arrival order
  std::vector<Sequence*> loading_;  // admitted, waiting for KV from outside (ExternalKv async)
};

}  // namespace tessera::engine
