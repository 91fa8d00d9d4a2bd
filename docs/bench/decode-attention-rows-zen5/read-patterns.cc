// How fast two threads read a KV cache laid out as Tessera's ([position][kv head][head_dim], f16, head_dim 128, 8 kv
// heads: 2 KiB a position) in three orders, no arithmetic but 512-bit loads and adds (issue 31, decode attention):
//   front to back   the whole buffer in order, each thread one half (the hardware prefetcher alone);
//   by kv head      a kv head's 256 bytes of every position, blocks of 256 positions, each thread four kv heads
//                   (what decode attention's (sequence, kv head) items read), rows prefetched 64 positions ahead;
//   chunks of rows  each thread one half of the positions, 16 positions at a time, every kv head's 256 bytes of them
//                   in turn, the next chunk's whole rows prefetched meanwhile, a few lines a step (the order
//                   rows-chunks.patch reads in).
// Build and run: g++ -O2 -mavx512f -pthread read-patterns.cc -o read-patterns && ./read-patterns
#include <immintrin.h>
#include <sys/mman.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {
volatile float g_sink;
constexpr size_t kBytes = size_t{512} << 20, kRow = 2048, kSlice = 256, kRows = kBytes / kRow;

float read_bytes(const char* p, size_t bytes) {
  __m512 a = _mm512_setzero_ps(), b = _mm512_setzero_ps();
  for (size_t o = 0; o < bytes; o += 128) {
    a = _mm512_add_ps(a, _mm512_load_ps(reinterpret_cast<const float*>(p + o)));
    b = _mm512_add_ps(b, _mm512_load_ps(reinterpret_cast<const float*>(p + o + 64)));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(a, b));
}

void prefetch(const char* p, size_t bytes) {
  for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
}

float front_to_back(const char* buf, int t, int threads) {
  const size_t lo = kBytes / threads * t, hi = lo + kBytes / threads;
  float s = 0;
  for (size_t o = lo; o < hi; o += kRow) s += read_bytes(buf + o, kRow);
  return s;
}

float by_kv_head(const char* buf, int t, int threads) {
  const int per = 8 / threads;
  float s = 0;
  for (size_t r0 = 0; r0 < kRows; r0 += 256) {
    for (int h = t * per; h < (t + 1) * per; ++h) {
      for (size_t r = r0; r < r0 + 256; ++r) {
        if (r + 64 < kRows) prefetch(buf + (r + 64) * kRow + h * kSlice, kSlice);
        s += read_bytes(buf + r * kRow + h * kSlice, kSlice);
      }
    }
  }
  return s;
}

float chunks_of_rows(const char* buf, int t, int threads) {
  constexpr size_t kChunk = 16, kLinesPerStep = kChunk * kRow / 64 / (8 * kChunk);  // 4
  const size_t lo = kRows / threads * t, hi = lo + kRows / threads;
  float s = 0;
  for (size_t r0 = lo; r0 < hi; r0 += kChunk) {
    const char* next = buf + (r0 + kChunk) * kRow;
    const bool ahead = r0 + 2 * kChunk <= hi;
    size_t step = 0;
    for (int h = 0; h < 8; ++h) {
      for (size_t r = r0; r < r0 + kChunk; ++r, ++step) {
        // Each step prefetches the next four lines of the next chunk (its whole rows, in address order) and the
        // row this kv head reads eight positions on.
        if (ahead) prefetch(next + step * kLinesPerStep * 64, kLinesPerStep * 64);
        if (r + 8 < r0 + kChunk) prefetch(buf + (r + 8) * kRow + h * kSlice, kSlice);
        s += read_bytes(buf + r * kRow + h * kSlice, kSlice);
      }
    }
  }
  return s;
}

double gbps(const char* buf, int threads, float (*walk)(const char*, int, int)) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) ts.emplace_back([=] { g_sink = walk(buf, t, threads); });
  for (auto& th : ts) th.join();
  return kBytes / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 1e9;
}
}  // namespace

int main() {
  char* buf = static_cast<char*>(std::aligned_alloc(size_t{2} << 20, kBytes));
  madvise(buf, kBytes, MADV_HUGEPAGE);
  std::memset(buf, 1, kBytes);
  for (int rep = 0; rep < 3; ++rep) {
    for (int threads = 1; threads <= 2; ++threads) {
      std::printf("round %d, %d thread(s): front to back %.1f, by kv head %.1f, chunks of rows %.1f GB/s\n", rep + 1,
                  threads, gbps(buf, threads, front_to_back), gbps(buf, threads, by_kv_head),
                  gbps(buf, threads, chunks_of_rows));
    }
  }
}
