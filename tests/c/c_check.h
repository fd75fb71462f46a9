/* What the C test programs share: CHECK (counts a failure and prints the condition and a message)
 * and uniform(lo, hi), a seeded xorshift64 generator, so that every run sees the same numbers. */
#ifndef KFLASH_TESTS_C_CHECK_H
#define KFLASH_TESTS_C_CHECK_H

#include <stdio.h>

static int failures = 0;

#define CHECK(cond, ...)                                                 \
  do {                                                                   \
    if (!(cond)) {                                                       \
      ++failures;                                                        \
      fprintf(stderr, "%s:%d: failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                      \
      fprintf(stderr, "\n");                                             \
    }                                                                    \
  } while (0)

static unsigned long long state = 88172645463325252ULL;
static double uniform(double lo, double hi) {
  state ^= state << 13;
  state ^= state >> 7;
  state ^= state << 17;
  return lo + (hi - lo) * (double)(state >> 11) / 9007199254740992.0;
}

#endif
