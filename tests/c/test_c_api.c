/* The C interface from C99: softmax, log_softmax and logsumexp and their gradients against naive
 * long-double references, in place and with padded rows, and the errors (before kflash_initialize, null pointers,
 * strides, memory kinds), each leaving its output untouched. Exits non-zero on any failure. */
#include <kflash/kflash.h>

#include "c_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The reference of one row: its maximum and log(sum exp(x - max)), in long double. */
static void reference_row(const double* x, long n, long double* m, long double* log_l) {
  long double mx = -INFINITY, l = 0;
  for (long i = 0; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  for (long i = 0; i < n; ++i) l += expl((long double)x[i] - mx);
  *m = mx;
  *log_l = logl(l);
}

/* softmax (and logsumexp) of 1000 rows x 4096 floats with padded rows (stride 4100), against the
 * tolerances of the C++ tests: probability p within 16 eps (1 + |x - max|) p (exp's argument x - max
 * is rounded), logsumexp within 1e-6 + 2 eps of its magnitude; the padding untouched. */
static void softmax_f32(void) {
  const long rows = 1000, cols = 4096, ld = 4100;
  float* x = malloc(sizeof(float) * rows * ld);
  float* y = malloc(sizeof(float) * rows * ld);
  float* lse = malloc(sizeof(float) * rows);
  double* row = malloc(sizeof(double) * cols);
  for (long i = 0; i < rows * ld; ++i) x[i] = (float)uniform(-20, 20), y[i] = -7.0f;
  CHECK(kflash_softmax_f32(KFLASH_MEMORY_HOST, rows, cols, x, ld, y, ld) == KFLASH_SUCCESS, "%s", kflash_last_error());
  CHECK(kflash_logsumexp_f32(KFLASH_MEMORY_HOST, rows, cols, x, ld, lse) == KFLASH_SUCCESS, "%s", kflash_last_error());
  CHECK(strcmp(kflash_last_error(), "") == 0, "a successful call leaves no message: %s", kflash_last_error());
  double worst = 0, worst_lse = 0;
  int padding_kept = 1;
  for (long r = 0; r < rows; ++r) {
    long double m, log_l;
    for (long c = 0; c < cols; ++c) row[c] = x[r * ld + c];
    reference_row(row, cols, &m, &log_l);
    for (long c = 0; c < cols; ++c) {
      const long double ref = expl((long double)row[c] - m - log_l);
      const double err = (double)(fabsl(y[r * ld + c] - ref) / (ref * (1 + fabsl((long double)row[c] - m))));
      worst = err > worst ? err : worst;
    }
    for (long c = cols; c < ld; ++c) padding_kept = padding_kept && y[r * ld + c] == -7.0f;
    const double e = (double)(fabsl(lse[r] - (m + log_l)) / (1e-6L + 2 * 1.1920929e-7L * fabsl(m + log_l)));
    worst_lse = e > worst_lse ? e : worst_lse;
  }
  CHECK(worst <= 16 * 1.1920929e-7, "worst error of softmax over its tolerance's scale %g", worst);
  CHECK(worst_lse <= 1, "worst error of logsumexp over its tolerance %g", worst_lse);
  CHECK(padding_kept, "the padding between rows was written");
  free(x), free(y), free(lse), free(row);
}

/* softmax and log_softmax of 16-bit rows (bf16 and f16, 40 rows x 1500 with padded rows, random
 * bit patterns of magnitudes 1/32 to 16), logsumexp into float: each output within one unit in the
 * last place of its 16-bit value (at least the smallest subnormal) plus float's error (as the f32
 * tests'); the padding untouched. */
static void rows_16_bit(int f16) {
  const long rows = 40, cols = 1500, ld = 1504;
  const int mant = f16 ? 10 : 7, bias = f16 ? 15 : 127;
  uint16_t* x = malloc(sizeof(uint16_t) * rows * ld);
  uint16_t* y = malloc(sizeof(uint16_t) * rows * ld);
  float* lse = malloc(sizeof(float) * rows);
  double* row = malloc(sizeof(double) * cols);
  for (long i = 0; i < rows * ld; ++i) {
    const int e = bias - 5 + (int)uniform(0, 9); /* 2^-5 .. 2^4 */
    const int sign = uniform(0, 1) < 0.5 ? 0x8000 : 0, m = (int)uniform(0, 1 << mant) & ((1 << mant) - 1);
    x[i] = (uint16_t)(sign | (e << mant) | m);
    y[i] = 0x7E00;
  }
  const char* name = f16 ? "f16" : "bf16";
  for (int log_space = 0; log_space < 2; ++log_space) {
    kflash_status st;
    if (f16) st = log_space ? kflash_log_softmax_f16(KFLASH_MEMORY_HOST, rows, cols, x, ld, y, ld)
                            : kflash_softmax_f16(KFLASH_MEMORY_HOST, rows, cols, x, ld, y, ld);
    else st = log_space ? kflash_log_softmax_bf16(KFLASH_MEMORY_HOST, rows, cols, x, ld, y, ld)
                        : kflash_softmax_bf16(KFLASH_MEMORY_HOST, rows, cols, x, ld, y, ld);
    CHECK(st == KFLASH_SUCCESS, "%s", kflash_last_error());
    CHECK((f16 ? kflash_logsumexp_f16 : kflash_logsumexp_bf16)(KFLASH_MEMORY_HOST, rows, cols, x, ld, lse) ==
              KFLASH_SUCCESS,
          "%s", kflash_last_error());
    double worst = 0, worst_lse = 0;
    int padding_kept = 1;
    for (long r = 0; r < rows; ++r) {
      long double m, log_l;
      for (long c = 0; c < cols; ++c) row[c] = decode16(x[r * ld + c], f16);
      reference_row(row, cols, &m, &log_l);
      for (long c = 0; c < cols; ++c) {
        const long double d = (long double)row[c] - m;
        const long double ref = log_space ? d - log_l : expl(d - log_l);
        const long double fp32 = 16 * 1.1920929e-7L * (log_space ? 1 + fabsl(d) + fabsl(log_l) + fabsl(ref)
                                                                 : (1 + fabsl(d)) * ref);
        const long double tol = ldexpl(fabsl(ref), -mant) + ldexpl(1, f16 ? -24 : -133) + fp32;
        const double err = (double)(fabsl(decode16(y[r * ld + c], f16) - ref) / tol);
        worst = err > worst ? err : worst;
      }
      for (long c = cols; c < ld; ++c) padding_kept = padding_kept && y[r * ld + c] == 0x7E00;
      const double e = (double)(fabsl(lse[r] - (m + log_l)) / (1e-6L + 2 * 1.1920929e-7L * fabsl(m + log_l)));
      worst_lse = e > worst_lse ? e : worst_lse;
    }
    CHECK(worst <= 1, "%s %s: worst error over its tolerance %g", name, log_space ? "log_softmax" : "softmax", worst);
    CHECK(worst_lse <= 1, "%s logsumexp: worst error over its tolerance %g", name, worst_lse);
    CHECK(padding_kept, "%s: the padding between rows was written", name);
  }
  free(x), free(y), free(lse), free(row);
}

/* A random 16-bit value of magnitude 2^-5 to 2^2 (negative where `negative`, else either sign). */
static uint16_t random16(int f16, int negative) {
  const int mant = f16 ? 10 : 7, bias = f16 ? 15 : 127;
  const int e = bias - 5 + (int)uniform(0, 7), m = (int)uniform(0, 1 << mant) & ((1 << mant) - 1);
  const int sign = negative || uniform(0, 1) < 0.5 ? 0x8000 : 0;
  return (uint16_t)(sign | (e << mant) | m);
}

/* The gradients of 16-bit rows (20 x 300 of a row stride 301): softmax_backward apart,
 * log_softmax_backward in place over dy (y <= 0), logsumexp_backward with float lse and dlse; each
 * element within one unit in the last place of its 16-bit value plus float's error (64 eps times
 * the magnitude its terms give, as the f32 test's); the padding untouched. */
static void gradients_16_bit(int f16) {
  const long rows = 20, cols = 300, ld = 301;
  const int mant = f16 ? 10 : 7;
  const char* name = f16 ? "f16" : "bf16";
  static const char* ops[3] = {"softmax_backward", "log_softmax_backward", "logsumexp_backward"};
  uint16_t* a = malloc(sizeof(uint16_t) * rows * ld);
  uint16_t* b = malloc(sizeof(uint16_t) * rows * ld);
  uint16_t* dx = malloc(sizeof(uint16_t) * rows * ld);
  double* dy = malloc(sizeof(double) * rows * ld); /* b as drawn (log_softmax_backward writes over it) */
  float lse[20], dlse[20];
  for (int op = 0; op < 3; ++op) {
    for (long i = 0; i < rows * ld; ++i) {
      a[i] = random16(f16, op == 1);
      b[i] = random16(f16, 0);
      dy[i] = decode16(b[i], f16);
      dx[i] = 0x7E00;
    }
    for (long r = 0; r < rows; ++r) {
      long double sum = 0;
      for (long c = 0; c < cols; ++c) sum += expl(decode16(a[r * ld + c], f16));
      lse[r] = (float)logl(sum);
      dlse[r] = (float)uniform(-2, 2);
    }
    kflash_status st;
    uint16_t* out = op == 1 ? b : dx;
    if (op == 0) {
      st = (f16 ? kflash_softmax_backward_f16 : kflash_softmax_backward_bf16)(KFLASH_MEMORY_HOST, rows, cols, a, ld, b,
                                                                             ld, dx, ld);
    } else if (op == 1) {
      st = (f16 ? kflash_log_softmax_backward_f16 : kflash_log_softmax_backward_bf16)(KFLASH_MEMORY_HOST, rows, cols, a,
                                                                                     ld, b, ld, b, ld);
    } else {
      st = (f16 ? kflash_logsumexp_backward_f16 : kflash_logsumexp_backward_bf16)(KFLASH_MEMORY_HOST, rows, cols, a, ld,
                                                                                 lse, dlse, dx, ld);
    }
    CHECK(st == KFLASH_SUCCESS, "%s %s: %s", name, ops[op], kflash_last_error());
    double worst = 0;
    int padding_kept = 1;
    for (long r = 0; r < rows; ++r) {
      long double s = 0, abs_s = 0;
      for (long c = 0; c < cols; ++c) {
        const long double y = decode16(a[r * ld + c], f16), g = dy[r * ld + c];
        s += op == 0 ? g * y : g;
        abs_s += fabsl(op == 0 ? g * y : g);
      }
      for (long c = 0; c < cols; ++c) {
        const long double y = decode16(a[r * ld + c], f16), g = dy[r * ld + c];
        long double want, magnitude;
        if (op == 0) {
          want = y * (g - s), magnitude = fabsl(y) * (fabsl(g) + abs_s);
        } else if (op == 1) {
          want = g - expl(y) * s, magnitude = fabsl(g) + expl(y) * abs_s * (1 + fabsl(y));
        } else {
          want = dlse[r] * expl(y - lse[r]), magnitude = fabsl(want) * (1 + fabsl(y) + fabsl(lse[r]));
        }
        const long double tol = ldexpl(fabsl(want), -mant) + ldexpl(1, f16 ? -24 : -133) + 64 * 1.1920929e-7L * magnitude;
        const double e = (double)(fabsl(decode16(out[r * ld + c], f16) - want) / tol);
        worst = e > worst ? e : worst;
      }
      const long pad = r * ld + cols;
      padding_kept = padding_kept && (op == 1 ? decode16(b[pad], f16) == dy[pad] : dx[pad] == 0x7E00);
    }
    CHECK(worst <= 1, "%s %s: worst error over its tolerance %g", name, ops[op], worst);
    CHECK(padding_kept, "%s %s wrote the padding between rows", name, ops[op]);
  }
  free(a), free(b), free(dx), free(dy);
}

/* log_softmax in place on fp64 rows of 777: within 1e-13 of the reference (absolute over |ref| + 1). */
static void log_softmax_f64_in_place(void) {
  const long rows = 33, cols = 777;
  double* x = malloc(sizeof(double) * rows * cols);
  double* ref = malloc(sizeof(double) * rows * cols);
  double* lse = malloc(sizeof(double) * rows);
  for (long i = 0; i < rows * cols; ++i) x[i] = uniform(-300, 300);
  for (long r = 0; r < rows; ++r) {
    long double m, log_l;
    reference_row(x + r * cols, cols, &m, &log_l);
    for (long c = 0; c < cols; ++c) ref[r * cols + c] = (double)((long double)x[r * cols + c] - m - log_l);
  }
  CHECK(kflash_logsumexp_f64(KFLASH_MEMORY_HOST, rows, cols, x, cols, lse) == KFLASH_SUCCESS, "%s", kflash_last_error());
  CHECK(kflash_log_softmax_f64(KFLASH_MEMORY_HOST, rows, cols, x, cols, x, cols) == KFLASH_SUCCESS, "%s",
        kflash_last_error());
  double worst = 0;
  for (long i = 0; i < rows * cols; ++i) {
    const double err = fabs(x[i] - ref[i]) / (fabs(ref[i]) + 1);
    worst = err > worst ? err : worst;
  }
  CHECK(worst <= 1e-13, "worst error of log_softmax in place %g", worst);
  free(x), free(ref), free(lse);
}

/* The gradients: softmax_backward (f32, padded rows, dx apart), log_softmax_backward (f64, in place
 * over dy) and logsumexp_backward (f32) against long-double references from the same inputs, within
 * 64 eps of each element's magnitude (the terms its difference cancels); the padding untouched. */
static void gradients(void) {
  const long rows = 20, cols = 300, ld = 301;
  float* y = malloc(sizeof(float) * rows * ld);
  float* dy = malloc(sizeof(float) * rows * ld);
  float* dx = malloc(sizeof(float) * rows * ld);
  double* yd = malloc(sizeof(double) * rows * cols);
  double* dyd = malloc(sizeof(double) * rows * cols);
  double* ref = malloc(sizeof(double) * rows * cols);
  double* mag = malloc(sizeof(double) * rows * cols);
  float lse[20], dlse[20];
  double row[300];
  int padding_kept = 1;
  for (long r = 0; r < rows; ++r) { /* y = softmax of random logits, rounded to float */
    long double m, log_l;
    for (long c = 0; c < cols; ++c) row[c] = uniform(-8, 8);
    reference_row(row, cols, &m, &log_l);
    for (long c = 0; c < ld; ++c) {
      y[r * ld + c] = c < cols ? (float)expl((long double)row[c] - m - log_l) : 0.0f;
      dy[r * ld + c] = (float)uniform(-1, 1);
      dx[r * ld + c] = -7.0f;
    }
  }
  CHECK(kflash_softmax_backward_f32(KFLASH_MEMORY_HOST, rows, cols, y, ld, dy, ld, dx, ld) == KFLASH_SUCCESS, "%s",
        kflash_last_error());
  double worst = 0;
  for (long r = 0; r < rows; ++r) {
    long double s = 0, abs_s = 0;
    for (long c = 0; c < cols; ++c) {
      s += (long double)dy[r * ld + c] * y[r * ld + c];
      abs_s += fabsl((long double)dy[r * ld + c] * y[r * ld + c]);
    }
    for (long c = 0; c < cols; ++c) {
      const long double want = y[r * ld + c] * (dy[r * ld + c] - s);
      const long double m = fabsl((long double)y[r * ld + c]) * (fabsl((long double)dy[r * ld + c]) + abs_s);
      const double e = (double)(fabsl(dx[r * ld + c] - want) / (64 * 1.1920929e-7L * m + 1e-37L));
      worst = e > worst ? e : worst;
    }
    padding_kept = padding_kept && dx[r * ld + cols] == -7.0f;
  }
  CHECK(worst <= 1, "softmax_backward: worst error over its tolerance %g", worst);
  CHECK(padding_kept, "softmax_backward wrote the padding between rows");

  /* log_softmax_backward f64 in place: y = log-probabilities, dx over dy. */
  for (long r = 0; r < rows; ++r) {
    long double m, log_l;
    for (long c = 0; c < cols; ++c) row[c] = uniform(-8, 8);
    reference_row(row, cols, &m, &log_l);
    long double sum = 0, abs_sum = 0;
    for (long c = 0; c < cols; ++c) {
      yd[r * cols + c] = (double)((long double)row[c] - m - log_l);
      dyd[r * cols + c] = uniform(-1, 1);
      sum += dyd[r * cols + c], abs_sum += fabs(dyd[r * cols + c]);
    }
    for (long c = 0; c < cols; ++c) {
      const long double e = expl((long double)yd[r * cols + c]);
      ref[r * cols + c] = (double)(dyd[r * cols + c] - e * sum);
      mag[r * cols + c] = (double)(fabsl((long double)dyd[r * cols + c]) + e * abs_sum * (1 + fabsl((long double)yd[r * cols + c])));
    }
  }
  CHECK(kflash_log_softmax_backward_f64(KFLASH_MEMORY_HOST, rows, cols, yd, cols, dyd, cols, dyd, cols) ==
            KFLASH_SUCCESS, "%s", kflash_last_error());
  worst = 0;
  for (long i = 0; i < rows * cols; ++i) {
    const double e = fabs(dyd[i] - ref[i]) / (64 * 2.220446e-16 * mag[i] + 1e-300);
    worst = e > worst ? e : worst;
  }
  CHECK(worst <= 1, "log_softmax_backward in place: worst error over its tolerance %g", worst);

  /* logsumexp_backward f32: dx = dlse exp(x - lse) over the logits in y's storage. */
  for (long r = 0; r < rows; ++r) {
    long double m, log_l;
    for (long c = 0; c < cols; ++c) row[c] = (float)uniform(-8, 8), y[r * ld + c] = (float)row[c];
    reference_row(row, cols, &m, &log_l);
    lse[r] = (float)(m + log_l);
    dlse[r] = (float)uniform(-2, 2);
  }
  CHECK(kflash_logsumexp_backward_f32(KFLASH_MEMORY_HOST, rows, cols, y, ld, lse, dlse, dx, ld) == KFLASH_SUCCESS,
        "%s", kflash_last_error());
  worst = 0;
  for (long r = 0; r < rows; ++r) {
    for (long c = 0; c < cols; ++c) {
      const long double x = y[r * ld + c];
      const long double want = dlse[r] * expl(x - lse[r]);
      const double e = (double)(fabsl(dx[r * ld + c] - want) /
                                (64 * 1.1920929e-7L * fabsl(want) * (1 + fabsl(x) + fabsl((long double)lse[r])) + 1e-37L));
      worst = e > worst ? e : worst;
    }
  }
  CHECK(worst <= 1, "logsumexp_backward: worst error over its tolerance %g", worst);

  /* Bad calls name the argument and write nothing. */
  for (long i = 0; i < rows * ld; ++i) dx[i] = 5.0f;
  CHECK(kflash_softmax_backward_f32(KFLASH_MEMORY_HOST, rows, cols, y, ld, NULL, ld, dx, ld) ==
            KFLASH_ERROR_INVALID_ARGUMENT, "null dy");
  CHECK(strstr(kflash_last_error(), "kflash_softmax_backward_f32: dy is NULL (rows = 20, cols = 300)") != NULL, "%s",
        kflash_last_error());
  CHECK(kflash_logsumexp_backward_f32(KFLASH_MEMORY_HOST, rows, cols, y, ld, lse, NULL, dx, ld) ==
            KFLASH_ERROR_INVALID_ARGUMENT, "null dlse");
  CHECK(strstr(kflash_last_error(), "dlse is NULL") != NULL, "%s", kflash_last_error());
  CHECK(kflash_log_softmax_backward_f32(KFLASH_MEMORY_HOST, rows, cols, y, ld, dy, ld, dx, 299) ==
            KFLASH_ERROR_INVALID_ARGUMENT, "short dx stride");
  CHECK(strstr(kflash_last_error(), "dx_row_stride = 299 is less than cols") != NULL, "%s", kflash_last_error());
  CHECK(kflash_softmax_backward_f32(KFLASH_MEMORY_HOST, rows, cols, y, ld, dy, ld, y, ld) ==
            KFLASH_ERROR_INVALID_ARGUMENT, "dx over y");
  CHECK(strstr(kflash_last_error(), "overlaps") != NULL, "%s", kflash_last_error());
  int untouched = 1;
  for (long i = 0; i < rows * ld; ++i) untouched = untouched && dx[i] == 5.0f;
  CHECK(untouched, "a failed gradient call wrote dx");
  free(y), free(dy), free(dx), free(yd), free(dyd), free(ref), free(mag);
}

/* Each bad call returns its status, names the argument in its message and writes nothing. */
static void errors(void) {
  float x[12] = {0}, y[12];
  for (int i = 0; i < 12; ++i) y[i] = 5.0f;
  CHECK(kflash_softmax_f32(KFLASH_MEMORY_HOST, 3, 4, NULL, 4, y, 4) == KFLASH_ERROR_INVALID_ARGUMENT, "null x");
  CHECK(strstr(kflash_last_error(), "x is NULL (rows = 3, cols = 4)") != NULL, "%s", kflash_last_error());
  CHECK(kflash_log_softmax_f32(KFLASH_MEMORY_HOST, 3, 4, x, 4, NULL, 4) == KFLASH_ERROR_INVALID_ARGUMENT, "null y");
  CHECK(strstr(kflash_last_error(), "y is NULL") != NULL, "%s", kflash_last_error());
  CHECK(kflash_logsumexp_f32(KFLASH_MEMORY_HOST, 3, 4, x, 4, NULL) == KFLASH_ERROR_INVALID_ARGUMENT, "null out");
  CHECK(strstr(kflash_last_error(), "out is NULL") != NULL, "%s", kflash_last_error());
  CHECK(kflash_softmax_f32(KFLASH_MEMORY_HOST, 3, 4, x, 3, y, 4) == KFLASH_ERROR_INVALID_ARGUMENT, "short stride");
  CHECK(strstr(kflash_last_error(), "kflash_softmax_f32: x_row_stride = 3 is less than cols (rows = 3, cols = 4)") != NULL,
        "%s", kflash_last_error());
  CHECK(kflash_softmax_f32(KFLASH_MEMORY_HOST, -1, 4, x, 4, y, 4) == KFLASH_ERROR_INVALID_ARGUMENT, "negative rows");
  CHECK(strstr(kflash_last_error(), "negative extents (rows = -1, cols = 4)") != NULL, "%s", kflash_last_error());
  CHECK(kflash_softmax_f32((kflash_memory)7, 3, 4, x, 4, y, 4) == KFLASH_ERROR_INVALID_ARGUMENT, "memory kind");
  CHECK(strstr(kflash_last_error(), "memory = 7") != NULL, "%s", kflash_last_error());
  if (!kflash_has_device()) {
    CHECK(kflash_softmax_f32(KFLASH_MEMORY_DEVICE, 3, 4, x, 4, y, 4) == KFLASH_ERROR_UNSUPPORTED, "device memory");
    CHECK(strstr(kflash_last_error(), "without a device backend") != NULL, "%s", kflash_last_error());
  }
  /* The memory kind is checked before anything else, also in empty calls. */
  CHECK(kflash_softmax_f32((kflash_memory)7, 0, 4, NULL, 4, NULL, 4) == KFLASH_ERROR_INVALID_ARGUMENT, "empty call");
  int untouched = 1;
  for (int i = 0; i < 12; ++i) untouched = untouched && y[i] == 5.0f;
  CHECK(untouched, "a failed call wrote its output");
  /* Empty calls succeed; an empty row's logsumexp is -inf. */
  float lse[2] = {0, 0};
  CHECK(kflash_softmax_f32(KFLASH_MEMORY_HOST, 0, 4, NULL, 4, NULL, 4) == KFLASH_SUCCESS, "%s", kflash_last_error());
  CHECK(kflash_logsumexp_f32(KFLASH_MEMORY_HOST, 2, 0, NULL, 0, lse) == KFLASH_SUCCESS, "%s", kflash_last_error());
  CHECK(isinf(lse[0]) && lse[0] < 0 && isinf(lse[1]) && lse[1] < 0, "empty rows: %g %g", lse[0], lse[1]);
}

int main(void) {
  float x[4] = {1, 2, 3, 4}, y[4];
  CHECK(kflash_softmax_f32(KFLASH_MEMORY_HOST, 1, 4, x, 4, y, 4) == KFLASH_ERROR_NOT_INITIALIZED, "before initialize");
  CHECK(strstr(kflash_last_error(), "kflash_initialize") != NULL, "%s", kflash_last_error());
  CHECK(kflash_initialize() == KFLASH_SUCCESS, "%s", kflash_last_error());
  CHECK(kflash_initialize() == KFLASH_SUCCESS, "a second initialize: %s", kflash_last_error());
  CHECK(strlen(kflash_version()) > 0 && strlen(kflash_backends()) > 0, "version and backends");
  printf("kflash %s, backends %s\n", kflash_version(), kflash_backends());
  softmax_f32();
  log_softmax_f64_in_place();
  rows_16_bit(0);
  rows_16_bit(1);
  gradients();
  gradients_16_bit(0);
  gradients_16_bit(1);
  errors();
  CHECK(kflash_finalize() == KFLASH_SUCCESS, "%s", kflash_last_error());
  CHECK(kflash_softmax_f32(KFLASH_MEMORY_HOST, 1, 4, x, 4, y, 4) == KFLASH_ERROR_NOT_INITIALIZED, "after finalize");
  if (failures) fprintf(stderr, "%d failures\n", failures);
  else printf("all checks passed\n");
  return failures ? 1 : 0;
}
