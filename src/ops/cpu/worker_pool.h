// WorkerPool: the cpu backend's threads. One pool per stream, created with it, lives as long as it; an
// operator's parallel loop is one job on it, and a job costs one hand-off and one completion wait, no thread
// creation and no full barrier.
//
// Why not OpenMP's parallel-for: its end-of-region barrier waits for every thread of the team, so when the
// operating system deschedules one of them (a busy machine: perf showed 73% of a batch-8 decode step spent in
// libgomp's spin-wait with the load average at 10 on 2 cores) every other thread spins until it runs again.
// Here a job is split into chunks that participants claim from a shared counter, the calling thread included:
// the job is complete when every chunk is done, whoever did it, so a descheduled worker delays a job by at
// most the one chunk it holds. Results do not depend on which thread ran which chunk (each output element is
// computed by one chunk, in the same order), so dynamic claiming keeps kernels deterministic.
//
// Workers spin for half a millisecond after a job (the next operator of a step follows within microseconds, the
// next step of a busy server within a few hundred), never yielding the core, then sleep on a condition variable
// until the next job: spinning during and between a busy server's steps, asleep when it waits for requests.
//
// Thread-safety: run() is called by the one thread that owns the stream; jobs never nest (a job's chunks must
// not call run() on the same pool; they run inline if they do).
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace tessera::ops::cpu {

class WorkerPool {
 public:
  // `threads` participants in all: the caller of run() and threads - 1 workers (none for 1).
  explicit WorkerPool(int threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(ctx, chunk) once for every chunk in [0, chunks), spread over the participants; returns when
  // all are done. fn must not throw.
  using ChunkFn = void (*)(void* ctx, int64_t chunk);
  void run(int64_t chunks, ChunkFn fn, void* ctx);

  // Jobs handed to the workers so far (inline runs not counted).
  uint64_t jobs() const { return jobs_.load(std::memory_order_relaxed); }

 private:
  void worker_main();
  // Claims and runs chunks of the current job until none is left.
  void work_on_job();
  void wake_all();

  std::vector<std::thread> workers_;
  // The job. Written by run() only while no worker is inside a job (busy_ == 0), published by gen_.
  ChunkFn fn_ = nullptr;
  void* ctx_ = nullptr;
  int64_t chunks_ = 0;
  alignas(64) std::atomic<int64_t> next_{0};  // next chunk to claim
  alignas(64) std::atomic<int64_t> done_{0};  // chunks finished
  alignas(64) std::atomic<uint64_t> gen_{0};  // job generation: bumped once per job
  std::atomic<int> busy_{0};                  // workers between noticing a job and leaving it
  std::atomic<bool> writing_{false};          // run() is writing the job fields
  std::atomic<int> sleepers_{0};              // workers asleep on wake_
  std::mutex sleep_mu_;
  std::condition_variable wake_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> in_job_{false};  // a nested run() from inside a chunk runs inline
  std::atomic<uint64_t> jobs_{0};
};

// Runs fn(i) for i in [0, n) on `pool` (inline when pool is null, has one thread, or n * cost_per_item is below
// `min_work`), in chunks of consecutive indices: about four per thread so a late thread leaves little behind.
template <typename F>
void parallel_for(WorkerPool* pool, int64_t n, F&& fn, double work_per_item = 1.0, double min_work = 0.0) {
  if (n <= 0) return;
  const int threads = pool ? pool->threads() : 1;
  if (threads <= 1 || n == 1 || static_cast<double>(n) * work_per_item < min_work) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  const int64_t chunks = std::min<int64_t>(n, static_cast<int64_t>(threads) * 4);
  struct Job {
    std::remove_reference_t<F>* fn;
    int64_t n, chunks;
  } job{&fn, n, chunks};
  pool->run(
      chunks,
      [](void* p, int64_t c) {
        const Job& j = *static_cast<Job*>(p);
        const int64_t begin = j.n * c / j.chunks, end = j.n * (c + 1) / j.chunks;
        for (int64_t i = begin; i < end; ++i) (*j.fn)(i);
      },
      &job);
}

// The chunk bounds of parallel_for_tapered: each chunk takes 1 / (2 * threads) of the items left, but at least
// n / kTaperedFloor items (and one), so the chunks shrink geometrically to a 48th of the job, then stay there; the last
// takes what is left. Writes bounds[0] = 0 < bounds[1] < ... < bounds[chunks] = n and returns chunks (0 for n <= 0),
// at most kTaperedChunks (the geometric part takes about 2 * threads * ln(48 / (2 * threads)) chunks, the rest 48).
inline constexpr int kTaperedFloor = 48;
inline constexpr int kTaperedChunks = 128;
inline int tapered_bounds(int64_t n, int threads, int64_t* bounds) {
  bounds[0] = 0;
  if (n <= 0) return 0;
  const int64_t divisor = 2 * static_cast<int64_t>(std::max(threads, 1));
  const int64_t floor = std::max<int64_t>(1, n / kTaperedFloor);
  int chunks = 0;
  int64_t b = 0;
  while (b < n && chunks < kTaperedChunks - 1) {
    b = std::min(n, b + std::max(floor, (n - b) / divisor));
    bounds[++chunks] = b;
  }
  if (b < n) bounds[++chunks] = n;
  return chunks;
}

// parallel_for in chunks that shrink (tapered_bounds), claimed in order: the caller's wait for the last chunk of a
// job is then a fraction of a 48th of it, where parallel_for's equal chunks (four a thread) leave half a chunk on
// average, a sixteenth of a 2-thread job. For jobs of many equal, memory-bound items run back to back
// (the decode's one-row matmuls: 225 a token on llama3.1-8b), where the tail wait recurs every job. Same results as
// parallel_for: each index runs once, by whichever thread claims its chunk.
template <typename F>
void parallel_for_tapered(WorkerPool* pool, int64_t n, F&& fn) {
  if (n <= 0) return;
  const int threads = pool ? pool->threads() : 1;
  if (threads <= 1 || n == 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  struct Job {
    std::remove_reference_t<F>* fn;
    int64_t bounds[kTaperedChunks + 1];
  } job;
  job.fn = &fn;
  const int chunks = tapered_bounds(n, threads, job.bounds);
  pool->run(
      chunks,
      [](void* p, int64_t c) {
        const Job& j = *static_cast<Job*>(p);
        for (int64_t i = j.bounds[c]; i < j.bounds[c + 1]; ++i) (*j.fn)(i);
      },
      &job);
}

}  // namespace tessera::ops::cpu
