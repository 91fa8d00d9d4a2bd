// WorkerPool (worker_pool.h): chunk claiming, spin-then-sleep waits. The protocol, in short:
//   run():    set writing_ and wait until no worker is inside a job (busy_ == 0), write the job, bump gen_,
//             clear writing_, wake sleepers if any, claim chunks like a worker, wait until done_ == chunks.
//   worker:   wait for gen_ to change; busy_++; if writing_ is clear, the job gen_ names is published and
//             cannot be rewritten while busy_ > 0, so it claims chunks (none are left if that job is already
//             over); busy_--. All of these are seq_cst, so run() and a worker never both go ahead.
// A worker that goes to sleep announces it (sleepers_++, under sleep_mu_) before its last check of gen_, and
// run() reads sleepers_ after bumping gen_ (both seq_cst), then takes sleep_mu_ before notifying, so a wake-up
// is never lost. (A condition variable, not std::atomic::wait: GCC 12's wait on a 64-bit atomic lost a
// wake-up here and hung a stream's destructor.)
#include "ops/cpu/worker_pool.h"

#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace tessera::ops::cpu {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// How long a worker spins for the next job before it sleeps, and the caller for its job's last chunks before it
// yields: longer than the gap between two operators of a step and between the steps of a busy server (sampling,
// scheduling), far shorter than a server's wait for requests. No sched_yield in the workers' wait: on a machine
// shared with other processes a yield hands the core to one of them for a time slice (milliseconds), and the next
// step then starts without the worker (qwen3-30b-a3b decode at 2 threads beside a nice-10 build: 40-73 tok/s
// before, 67-97 with pause-only spinning; docs/benchmarks.md).
constexpr auto kWorkerSpin = std::chrono::microseconds(500);
constexpr auto kCallerSpin = std::chrono::microseconds(200);
constexpr int kPausesPerClockRead = 64;

// Spins while pending() holds, for up to `budget`; returns whether it still holds.
template <typename Pending>
bool spin_while(Pending pending, std::chrono::microseconds budget) {
  const auto until = std::chrono::steady_clock::now() + budget;
  for (;;) {
    for (int i = 0; i < kPausesPerClockRead; ++i) {
      if (!pending()) return false;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= until) return pending();
  }
}

}  // namespace

WorkerPool::WorkerPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_main(); });
}

WorkerPool::~WorkerPool() {
  stop_.store(true);
  gen_.fetch_add(1);
  wake_all();
  for (auto& t : workers_) t.join();
}

void WorkerPool::wake_all() {
  // Taking the lock orders this after a sleeper's check of gen_: it is either waiting (and is woken) or
  // will see the new generation.
  { std::lock_guard<std::mutex> lock(sleep_mu_); }
  wake_.notify_all();
}

void WorkerPool::work_on_job() {
  for (;;) {
    const int64_t c = next_.fetch_add(1, std::memory_order_relaxed);
    if (c >= chunks_) return;
    fn_(ctx_, c);
    done_.fetch_add(1, std::memory_order_release);
  }
}

void WorkerPool::worker_main() {
  // The generation at construction, not gen_ now: a thread that starts late, after the destructor bumped
  // gen_, must still see the change (reading gen_ here hung a short-lived pool's destructor).
  uint64_t seen = 0;
  for (;;) {
    // Wait for a new job: spin, then sleep.
    if (spin_while([&] { return gen_.load(std::memory_order_acquire) == seen; }, kWorkerSpin)) {
      std::unique_lock<std::mutex> lock(sleep_mu_);
      sleepers_.fetch_add(1);
      while (gen_.load() == seen) wake_.wait(lock);
      sleepers_.fetch_sub(1);
    }

    if (stop_.load()) return;
    busy_.fetch_add(1);
    // While run() writes a job, its fields and gen_ may disagree: stay out until it has published.
    if (!writing_.load()) {
      const uint64_t now = gen_.load();
      if (now != seen) {
        seen = now;
        if (stop_.load()) {
          busy_.fetch_sub(1);
          return;
        }
        work_on_job();  // a job already finished has no chunk left to claim: returns at once
      }
    }
    busy_.fetch_sub(1);
  }
}

void WorkerPool::run(int64_t chunks, ChunkFn fn, void* ctx) {
  if (chunks <= 0) return;
  if (workers_.empty() || in_job_.load(std::memory_order_relaxed)) {
    for (int64_t c = 0; c < chunks; ++c) fn(ctx, c);
    return;
  }
  // No worker may be inside a job while it is rewritten: announce the write, then check (seq_cst on both sides,
  // so either this sees the worker's busy_ or the worker sees writing_).
  const auto started = std::chrono::steady_clock::now();
  for (int spins = 0;; ++spins) {
    writing_.store(true);
    if (busy_.load() == 0) break;
    writing_.store(false);
    if (spins % kPausesPerClockRead != 0 || std::chrono::steady_clock::now() - started < kCallerSpin) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
  in_job_.store(true, std::memory_order_relaxed);
  fn_ = fn;
  ctx_ = ctx;
  chunks_ = chunks;
  next_.store(0, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  jobs_.fetch_add(1, std::memory_order_relaxed);
  gen_.fetch_add(1);  // seq_cst: publishes the job
  writing_.store(false);
  if (sleepers_.load() > 0) wake_all();
  work_on_job();
  // Chunks others claimed: spin, then give the core to whoever holds them (more threads than cores: a descheduled
  // worker may be waiting for this one).
  if (spin_while([&] { return done_.load(std::memory_order_acquire) < chunks; }, kCallerSpin)) {
    while (done_.load(std::memory_order_acquire) < chunks) std::this_thread::yield();
  }
  in_job_.store(false, std::memory_order_relaxed);
}

}  // namespace tessera::ops::cpu
