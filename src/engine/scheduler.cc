#include "engine/scheduler.h"

#include <algorithm>
#include <array>
#include <limits>

#include <fmt/core.h>

namespace tessera::engine {

Scheduler::Scheduler(KvCache& kv, SchedulerOptions options) : kv_(kv), options_(options) {}

Status Scheduler::add(Sequence* seq) {
  if (static_cast<int>(waiting_.size()) >= options_.max_waiting) {
    return resource_exhausted(fmt::format("the queue is full ({} requests waiting)", waiting_.size()));
  }
  waiting_.push_back(seq);
  return ok_status();
}

void Scheduler::add_running(Sequence* seq) {
  seq->prefix_checked = true;
  running_.push_back(seq);
}

void Scheduler::release_blocks(Sequence* seq) {
  kv_.release(seq->kv);
  seq->block_hashes.clear();
  seq->prefix_checked = false;
  seq->external_tokens = 0;
  seq->external_async = false;
}

void Scheduler::remove(Sequence* seq) {
  std::erase(running_, seq);
  std::erase(waiting_, seq);
  std::erase(loading_, seq);
  release_blocks(seq);
}

void Scheduler::finish_loading(Sequence* seq, int valid) {
  std::erase(loading_, seq);
  seq->kv.length = valid;
  seq->external_tokens = 0;
  seq->external_async = false;
  running_.push_back(seq);
}

void Scheduler::preempt(Sequence* victim, Schedule& out) {
  std::erase(running_, victim);
  release_blocks(victim);
  victim->preemptions++;
  // Back to the waiting queue in arrival order (it is older than anything that arrived after it).
  auto pos = std::find_if(waiting_.begin(), waiting_.end(), [&](Sequence* s) { return s->arrival > victim->arrival; });
  waiting_.insert(pos, victim);
  out.preempted.push_back(victim);
}

bool Scheduler::reserve_with_preemption(Sequence* seq, int length, Schedule& out) {
  while (!kv_.can_reserve(seq->kv, length)) {
    // The newest running sequence not already given work this step.
    Sequence* victim = nullptr;
    for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
      bool scheduled =
          std::any_of(out.chunks.begin(), out.chunks.end(), [&](const ScheduledChunk& c) { return c.seq == *it; });
      if (!scheduled) {
        victim = *it;
        break;
      }
    }
    if (victim == nullptr) return false;
    preempt(victim, out);
    if (victim == seq) return false;
  }
  return kv_.reserve(seq->kv, length).ok();
}

ScheduledChunk Scheduler::chunk(Sequence* seq, int num_tokens) const {
  ScheduledChunk c{seq, num_tokens};
  if (kv_.state_checkpoints() == 0 || seq->uncached || num_tokens <= 0) return c;
  // Where another prompt's cached blocks ended (a shared system prompt: the next prompt with it finds the state
  // there), where the request expects later prompts to part from this one (the end of a chat's system prompt: the
  // first prompt with it leaves the state there for the second), and the last block boundary before the prompt's
  // last token: the longest prefix a later prompt starting with this one (or this one sent again) can take, since at
  // least one token is always computed.
  const int bt = kv_.block_tokens();
  const int end = (seq->prompt_len - 1) / bt * bt;
  // The chain hash of the block ending at `at` (from the registered blocks' when they reach the one before).
  auto hash_at = [&](int at) {
    const auto n = static_cast<size_t>(at / bt);
    if (n <= seq->block_hashes.size()) return seq->block_hashes[n - 1];
    if (n == seq->block_hashes.size() + 1)
      return BlockManager::chain_hash(n == 1 ? 0 : seq->block_hashes.back(),
                                      std::span(seq->tokens).subspan((n - 1) * static_cast<size_t>(bt), bt));
    return BlockManager::chain_hashes(seq->tokens, bt, n).back();
  };
  std::array<int, 3> at_all = {seq->state_branch, std::min(seq->state_hint / bt * bt, end), end};
  std::sort(at_all.begin(), at_all.end());
  for (int at : at_all) {
    if (at <= 0 || seq->kv.length >= at || seq->kv.length + num_tokens < at) continue;
    if (c.num_states > 0 && c.states[static_cast<size_t>(c.num_states - 1)].position == at) continue;
    c.states[static_cast<size_t>(c.num_states++)] = {at, hash_at(at)};
  }
  // Past the prompt's end (its reply's decode): the last block boundary this chunk crosses, where the next turn of a
  // conversation goes on from (KvCache's running checkpoint, one per sequence), paired with the prompt's end one.
  const int last = (seq->kv.length + num_tokens) / bt * bt;
  if (seq->keep_reply_state && last > end && last > seq->kv.length)
    c.states[static_cast<size_t>(c.num_states++)] = {last, hash_at(last), /*running=*/true,
                                                     end > 0 ? hash_at(end) : BlockHash{0}};
  return c;
}

Schedule Scheduler::schedule() {
  Schedule out;
  int budget = options_.max_batch_tokens;
  const size_t max_chunks = options_.max_step_sequences > 0 ? static_cast<size_t>(options_.max_step_sequences)
                                                            : std::numeric_limits<size_t>::max();
  // 1. Running sequences, decodes before prompt chunks, each group oldest first.
  for (int pass = 0; pass < 2 && budget > 0; ++pass) {
    std::vector<Sequence*> snapshot = running_;
    for (Sequence* seq : snapshot) {
      if (budget <= 0 || out.chunks.size() >= max_chunks) break;
      if (std::find(running_.begin(), running_.end(), seq) == running_.end()) continue;  // preempted meanwhile
      const bool decoding = seq->remaining() == 1;
      if (decoding != (pass == 0)) continue;
      const int take = std::min(seq->remaining(), budget);
      if (!reserve_with_preemption(seq, seq->kv.length + take, out)) continue;
      out.chunks.push_back(chunk(seq, take));
      budget -= take;
    }
  }
  // 2. Admissions in strict arrival order.
  while (budget > 0 && out.chunks.size() < max_chunks && !waiting_.empty() &&
         static_cast<int>(running_.size()) < options_.max_running) {
    Sequence* seq = waiting_.front();
    // Just preempted to make room: readmitting it in the same step would only undo that.
    if (std::find(out.preempted.begin(), out.preempted.end(), seq) != out.preempted.end()) break;
    const int total = static_cast<int>(seq->tokens.size());
    // A sequence that cannot fit even in an empty cache would block the queue forever.
    if ((total + kv_.block_tokens() - 1) / kv_.block_tokens() > kv_.num_blocks()) {
      waiting_.pop_front();
      out.rejected.push_back(seq);
      continue;
    }
    if (!seq->prefix_checked) {
      // Keep at least one token to compute: its logits are needed.
      kv_.match_prefix(seq->kv, seq->tokens, seq->compute_prompt ? 0 : std::min(total - 1, seq->max_prefix),
                       &seq->state_branch);
      seq->external_tokens = 0;
      seq->external_async = false;
      if (external_ != nullptr && !seq->compute_prompt) {
        const ExternalKv::Match m = external_->match(*seq);
        // Only a load that ends later (and brings the first tokens, engine/kv_connector.h) may reach the end.
        seq->external_tokens = std::clamp(m.tokens, 0, total - seq->kv.length - (m.async ? 0 : 1));
        seq->external_async = m.async && seq->external_tokens > 0;
      }
      seq->prefix_checked = true;
    }
    const int local = seq->kv.length;
    const int supplied = local + seq->external_tokens;
    // Loading from outside computes nothing this step: blocks for the supplied positions only, and no budget.
    const int take = seq->external_async ? 0 : std::min(total - supplied, budget);
    if (seq->whole && take < total - supplied) break;  // an encoder's input waits for a step with room for all of it
    // A windowed cache's sliding layers: blocks only for the window that positions after the supplied ones read.
    if (!kv_.can_reserve(seq->kv, supplied + take, supplied) ||
        !kv_.reserve(seq->kv, supplied + take, -1, supplied).ok()) {
      release_blocks(seq);  // hold nothing while waiting: the prefix is looked up again next time
      break;                // wait for blocks; never skip ahead of the oldest request
    }
    waiting_.pop_front();
    if (seq->external_async) {
      loading_.push_back(seq);
      external_->allocated(*seq, local);
      continue;
    }
    seq->kv.length = supplied;  // the supplied positions are loaded during this step, before each layer runs
    running_.push_back(seq);
    if (external_ != nullptr && !seq->compute_prompt) external_->allocated(*seq, local);
    out.chunks.push_back(chunk(seq, take));
    budget -= take;
  }
  return out;
}

void Scheduler::commit(const Schedule& schedule) {
  const int bt = kv_.block_tokens();
  for (const ScheduledChunk& c : schedule.chunks) {
    Sequence& s = *c.seq;
    const size_t full = s.uncached ? 0 : static_cast<size_t>(s.kv.length / bt);
    while (s.block_hashes.size() < full) {
      const size_t i = s.block_hashes.size();
      BlockHash parent = i == 0 ? 0 : s.block_hashes[i - 1];
      BlockHash h = BlockManager::chain_hash(
          parent, std::span(s.tokens).subspan(i * static_cast<size_t>(bt), static_cast<size_t>(bt)));
      kv_.register_full_block(s.kv, i, h, parent);
      s.block_hashes.push_back(h);
    }
    // A windowed cache: the sliding layers' blocks that no later step reads go back, registered first, so that a
    // later prompt sharing this prefix finds the window before the point where they part.
    kv_.trim_window(s.kv);
  }
}

}  // namespace tessera::engine
