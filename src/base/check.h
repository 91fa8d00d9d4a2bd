// TS_CHECK: abort on a broken invariant (a programmer error, never bad user input: that is a Status).
#pragma once

#include <cstdio>
#include <cstdlib>

#define TS_CHECK(cond)                                                                    \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "FATAL %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)

#define TS_CHECK_MSG(cond, msg)                                                                     \
  do {                                                                                              \
    if (!(cond)) {                                                                                  \
      std::fprintf(stderr, "FATAL %s:%d: check failed: %s (%s)\n", __FILE__, __LINE__, #cond, msg); \
      std::abort();                                                                                 \
    }                                                                                               \
  } while (0)
