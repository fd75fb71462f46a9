/* What the C test programs share: CHECK (counts a failure and prints the condition and a message),
 * uniform(lo, hi), a seeded xorshift64 generator, so that every run sees the same numbers, and the
 * 16-bit formats' bits to and from double. */
#ifndef KFLASH_TESTS_C_CHECK_H
#define KFLASH_TESTS_C_CHECK_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

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

/* A 16-bit value's bits as a double: bf16 (8-bit exponent, 7-bit mantissa) or f16 (5, 10). */
static inline double decode16(uint16_t bits, int f16) {
  const int mant = f16 ? 10 : 7, bias = f16 ? 15 : 127, emax = f16 ? 31 : 255;
  const int e = (bits & 0x7FFF) >> mant, m = bits & ((1 << mant) - 1);
  const double sign = bits & 0x8000 ? -1.0 : 1.0;
  if (e == emax) return m ? NAN : sign * INFINITY;
  if (e == 0) return sign * ldexp(m, 1 - bias - mant);
  return sign * ldexp((1 << mant) + m, e - bias - mant);
}

/* A value exact in both 16-bit formats (at most 8 significant bits, a normal float16 or 0) as
 * bfloat16 or float16 bits. */
static inline uint16_t encode16(double x, int f16) {
  if (!f16) {
    const float f = (float)x;
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return (uint16_t)(bits >> 16);
  }
  if (x == 0) return 0;
  int e;
  const double m = frexp(fabs(x), &e); /* |x| = (2m) 2^(e - 1), 2m in [1, 2) */
  return (uint16_t)((x < 0 ? 0x8000u : 0u) | ((unsigned)(e - 1 + 15) << 10) | (unsigned)((2 * m - 1) * 1024));
}

#endif
