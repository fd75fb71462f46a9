/* kflash_cross_entropy and kflash_cross_entropy_backward from C99 against long-double references:
 * fp32 logits in padded rows with int64 targets (one row ignored), label smoothing and z-loss, the
 * mean; the fp64 gradient in place over the logits with int32 targets, and apart with the forward's
 * lse; 16-bit logits with float32 loss and gradient factors; and bad input: each error returns its status, names the argument and writes nothing. */
#include <kflash/kflash.h>

#include "c_check.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ROWS = 9, VOCAB = 70, LD = 75 }; /* LD: the padded row stride of the fp32 logits */
#define EPSILON 0.1
#define Z_LOSS 1e-3
#define IGNORED (-100)

static kflash_array array(void* data, kflash_dtype dtype, int rank, const int64_t* extents, const int64_t* strides) {
  kflash_array a;
  memset(&a, 0, sizeof a);
  a.data = data, a.dtype = dtype, a.rank = rank;
  for (int d = 0; d < rank; ++d) a.extent[d] = extents[d], a.stride[d] = strides ? strides[d] : 0;
  return a;
}

static long double row_lse(const double* x) {
  long double m = -INFINITY, l = 0;
  for (int c = 0; c < VOCAB; ++c) m = x[c] > m ? x[c] : m;
  for (int c = 0; c < VOCAB; ++c) l += expl((long double)x[c] - m);
  return m + logl(l);
}

/* Row loss: (1 - eps)(lse - x_t) + (eps / C) sum_c (lse - x_c) + z lse^2, 0 where ignored. */
static long double reference_loss(const double* x, int64_t t) {
  if (t == IGNORED) return 0;
  const long double lse = row_lse(x);
  long double smooth = 0;
  for (int c = 0; c < VOCAB; ++c) smooth += lse - x[c];
  return (1 - EPSILON) * (lse - x[t]) + EPSILON / VOCAB * smooth + Z_LOSS * lse * lse;
}

/* d loss / d x_c times dloss: dloss ((1 + 2 z lse) p_c - eps / C - (1 - eps) [c = t]). */
static long double reference_grad(const double* x, int64_t t, double dloss, int c) {
  if (t == IGNORED) return 0;
  const long double lse = row_lse(x);
  const long double p = expl(x[c] - lse);
  return dloss * ((1 + 2 * Z_LOSS * lse) * p - EPSILON / VOCAB - (c == t ? 1 - EPSILON : 0));
}

static double logits[ROWS][VOCAB];
static int64_t targets64[ROWS];
static int32_t targets32[ROWS];
static double dloss[ROWS];

static void make_inputs(void) {
  for (int r = 0; r < ROWS; ++r) {
    for (int c = 0; c < VOCAB; ++c) logits[r][c] = uniform(-6, 6);
    targets64[r] = r == 4 ? IGNORED : (int64_t)(uniform(0, VOCAB - 1e-9));
    targets32[r] = (int32_t)targets64[r];
    dloss[r] = uniform(-2, 2);
  }
}

static kflash_cross_entropy_options options(void) {
  kflash_cross_entropy_options o;
  kflash_cross_entropy_options_init(&o);
  CHECK(o.ignore_index == IGNORED && o.label_smoothing == 0 && o.z_loss == 0, "defaults");
  o.label_smoothing = EPSILON;
  o.z_loss = Z_LOSS;
  return o;
}

/* fp32 loss and mean, logits in rows of stride LD (the padding must stay), int64 targets. Each
 * loss within 64 eps of (1 + its terms' magnitudes), which bounds lse's and the sums' rounding. */
static void forward_f32(void) {
  float* x = malloc(sizeof(float) * ROWS * LD);
  float loss[ROWS], mean = -1;
  for (int r = 0; r < ROWS; ++r)
    for (int c = 0; c < LD; ++c) x[r * LD + c] = c < VOCAB ? (float)logits[r][c] : 1234.5f;
  const int64_t ext[2] = {ROWS, VOCAB}, str[2] = {LD, 1}, rows[1] = {ROWS}, one[1] = {1};
  const kflash_array lg = array(x, KFLASH_FLOAT32, 2, ext, str), tg = array(targets64, KFLASH_INT64, 1, rows, NULL),
                     ls = array(loss, KFLASH_FLOAT32, 1, rows, NULL), mn = array(&mean, KFLASH_FLOAT32, 1, one, NULL);
  const kflash_cross_entropy_options o = options();
  CHECK(kflash_cross_entropy(KFLASH_MEMORY_HOST, &lg, &tg, &ls, &mn, &o) == KFLASH_SUCCESS, "%s", kflash_last_error());
  long double sum = 0;
  int counted = 0;
  for (int r = 0; r < ROWS; ++r) {
    double xd[VOCAB];
    for (int c = 0; c < VOCAB; ++c) xd[c] = (float)logits[r][c];
    const long double ref = reference_loss(xd, targets64[r]);
    const long double tol = 64 * FLT_EPSILON * (1 + fabsl(ref) + 6 + fabsl(row_lse(xd)));
    CHECK(fabsl(loss[r] - ref) <= tol, "loss[%d] = %.9g, reference %.9Lg", r, loss[r], ref);
    if (targets64[r] != IGNORED) sum += ref, ++counted;
  }
  CHECK(loss[4] == 0, "the ignored row's loss is %g", loss[4]);
  CHECK(fabsl(mean - sum / counted) <= 64 * FLT_EPSILON * (1 + fabsl(sum / counted) + 6), "mean %.9g, reference %.9Lg",
        mean, sum / counted);
  for (int r = 0; r < ROWS; ++r)
    for (int c = VOCAB; c < LD; ++c) CHECK(x[r * LD + c] == 1234.5f, "padding of row %d written", r);
  free(x);
}

/* fp64 gradient in place over the logits (int32 targets), then apart with the forward's lse; each
 * element within 64 eps of (|dloss| (1 + 2 z |lse|) p + eps / C + 1). */
static void backward_f64(void) {
  double x[ROWS][VOCAB], apart[ROWS][VOCAB], lse[ROWS];
  memcpy(x, logits, sizeof x);
  const int64_t ext[2] = {ROWS, VOCAB}, rows[1] = {ROWS};
  const kflash_array lg = array(x, KFLASH_FLOAT64, 2, ext, NULL), orig = array(logits, KFLASH_FLOAT64, 2, ext, NULL),
                     ap = array(apart, KFLASH_FLOAT64, 2, ext, NULL), tg = array(targets32, KFLASH_INT32, 1, rows, NULL),
                     dl = array(dloss, KFLASH_FLOAT64, 1, rows, NULL), ls = array(lse, KFLASH_FLOAT64, 1, rows, NULL);
  const kflash_cross_entropy_options o = options();
  for (int r = 0; r < ROWS; ++r) lse[r] = (double)row_lse(logits[r]);
  CHECK(kflash_cross_entropy_backward(KFLASH_MEMORY_HOST, &lg, &tg, &dl, &lg, NULL, &o) == KFLASH_SUCCESS, "%s",
        kflash_last_error());
  CHECK(kflash_cross_entropy_backward(KFLASH_MEMORY_HOST, &orig, &tg, &dl, &ap, &ls, &o) == KFLASH_SUCCESS, "%s",
        kflash_last_error());
  for (int r = 0; r < ROWS; ++r)
    for (int c = 0; c < VOCAB; ++c) {
      const long double ref = reference_grad(logits[r], targets32[r], dloss[r], c);
      const long double tol = 64 * DBL_EPSILON * (fabs(dloss[r]) * (1 + 2 * Z_LOSS * fabs(lse[r])) + EPSILON / VOCAB + 1);
      CHECK(fabsl(x[r][c] - ref) <= tol, "in place (%d, %d): %.17g, reference %.17Lg", r, c, x[r][c], ref);
      CHECK(fabsl(apart[r][c] - ref) <= tol, "with lse (%d, %d): %.17g, reference %.17Lg", r, c, apart[r][c], ref);
    }
}

/* 16-bit logits (bfloat16, float16; values k / 32, exact in both) with float32 loss, dloss and lse:
 * the loss within 64 float eps as forward_f32's; the gradient in place over the logits, each element
 * within one unit in the last place of its 16-bit value plus the float bound of backward_f64's
 * form; a float64 dloss refused. */
static void half_logits(int f16) {
  uint16_t x[ROWS][VOCAB];
  double xd[ROWS][VOCAB];
  float loss[ROWS], dl32[ROWS], lse[ROWS];
  const char* name = f16 ? "float16" : "bfloat16";
  for (int r = 0; r < ROWS; ++r) {
    for (int c = 0; c < VOCAB; ++c) xd[r][c] = floor(uniform(-192, 193)) / 32, x[r][c] = encode16(xd[r][c], f16);
    dl32[r] = (float)dloss[r];
    lse[r] = (float)row_lse(xd[r]);
  }
  const kflash_dtype type = f16 ? KFLASH_FLOAT16 : KFLASH_BFLOAT16;
  const int64_t ext[2] = {ROWS, VOCAB}, rows[1] = {ROWS};
  const kflash_array lg = array(x, type, 2, ext, NULL), tg = array(targets64, KFLASH_INT64, 1, rows, NULL),
                     ls = array(loss, KFLASH_FLOAT32, 1, rows, NULL), dl = array(dl32, KFLASH_FLOAT32, 1, rows, NULL),
                     le = array(lse, KFLASH_FLOAT32, 1, rows, NULL), d64 = array(dloss, KFLASH_FLOAT64, 1, rows, NULL);
  const kflash_cross_entropy_options o = options();
  CHECK(kflash_cross_entropy(KFLASH_MEMORY_HOST, &lg, &tg, &ls, NULL, &o) == KFLASH_SUCCESS, "%s: %s", name,
        kflash_last_error());
  for (int r = 0; r < ROWS; ++r) {
    const long double ref = reference_loss(xd[r], targets64[r]);
    const long double tol = 64 * FLT_EPSILON * (1 + fabsl(ref) + 6 + fabsl(row_lse(xd[r])));
    CHECK(fabsl(loss[r] - ref) <= tol, "%s loss[%d] = %.9g, reference %.9Lg", name, r, loss[r], ref);
  }
  CHECK(kflash_cross_entropy_backward(KFLASH_MEMORY_HOST, &lg, &tg, &d64, &lg, NULL, &o) ==
            KFLASH_ERROR_INVALID_ARGUMENT,
        "%s: float64 dloss", name);
  CHECK(strstr(kflash_last_error(), "float64 must have dtype float32") != NULL, "%s", kflash_last_error());
  CHECK(kflash_cross_entropy_backward(KFLASH_MEMORY_HOST, &lg, &tg, &dl, &lg, &le, &o) == KFLASH_SUCCESS, "%s: %s",
        name, kflash_last_error());
  for (int r = 0; r < ROWS; ++r)
    for (int c = 0; c < VOCAB; ++c) {
      const long double ref = reference_grad(xd[r], targets64[r], dl32[r], c);
      const long double tol = ldexpl(fabsl(ref), f16 ? -10 : -7) + ldexpl(1, f16 ? -24 : -133) +
                              64 * FLT_EPSILON * (fabs(dloss[r]) * (1 + 2 * Z_LOSS * fabs(lse[r])) + EPSILON / VOCAB + 1);
      const double got = decode16(x[r][c], f16);
      CHECK(fabsl(got - ref) <= tol, "%s in place (%d, %d): %.9g, reference %.9Lg", name, r, c, got, ref);
    }
}

/* Bad calls: a status, a message naming the argument, and the outputs untouched. */
static void errors(void) {
  double x[ROWS][VOCAB], out[ROWS][VOCAB], loss[ROWS];
  int64_t bad[ROWS];
  float wrong[ROWS];
  memcpy(x, logits, sizeof x);
  memcpy(bad, targets64, sizeof bad);
  bad[6] = VOCAB;
  for (int r = 0; r < ROWS; ++r) loss[r] = -7;
  for (int r = 0; r < ROWS; ++r)
    for (int c = 0; c < VOCAB; ++c) out[r][c] = -7;
  const int64_t ext[2] = {ROWS, VOCAB}, rows[1] = {ROWS}, two[1] = {2}, fewer[1] = {ROWS - 1};
  const kflash_array lg = array(x, KFLASH_FLOAT64, 2, ext, NULL), tg = array(targets64, KFLASH_INT64, 1, rows, NULL),
                     tb = array(bad, KFLASH_INT64, 1, rows, NULL), tf = array(wrong, KFLASH_FLOAT32, 1, rows, NULL),
                     ts = array(targets64, KFLASH_INT64, 1, fewer, NULL), ls = array(loss, KFLASH_FLOAT64, 1, rows, NULL),
                     mn = array(loss, KFLASH_FLOAT64, 1, two, NULL), ou = array(out, KFLASH_FLOAT64, 2, ext, NULL),
                     dl = array(dloss, KFLASH_FLOAT64, 1, rows, NULL), lf = array(x, KFLASH_FLOAT32, 2, ext, NULL);
  kflash_cross_entropy_options o = options();

  CHECK(kflash_cross_entropy(KFLASH_MEMORY_HOST, &lg, &tb, &ls, NULL, &o) == KFLASH_ERROR_INVALID_ARGUMENT, "bad target");
  CHECK(strstr(kflash_last_error(), "kflash_cross_entropy: targets(6) = 70 is outside [0, 70)") != NULL, "%s",
        kflash_last_error());
  CHECK(kflash_cross_entropy_backward(KFLASH_MEMORY_HOST, &lg, &tb, &dl, &ou, NULL, &o) == KFLASH_ERROR_INVALID_ARGUMENT,
        "bad target");
  CHECK(strstr(kflash_last_error(), "kflash_cross_entropy_backward: targets(6) = 70") != NULL, "%s", kflash_last_error());
  CHECK(kflash_cross_entropy(KFLASH_MEMORY_HOST, &lg, &tf, &ls, NULL, &o) == KFLASH_ERROR_INVALID_ARGUMENT, "float targets");
  CHECK(strstr(kflash_last_error(), "targets (9) float32 must be int32 or int64") != NULL, "%s", kflash_last_error());
  CHECK(kflash_cross_entropy(KFLASH_MEMORY_HOST, &lg, &ts, &ls, NULL, &o) == KFLASH_ERROR_INVALID_ARGUMENT, "8 targets");
  CHECK(strstr(kflash_last_error(), "targets") != NULL && strstr(kflash_last_error(), "(9, 70)") != NULL, "%s",
        kflash_last_error());
  CHECK(kflash_cross_entropy(KFLASH_MEMORY_HOST, &lg, &tg, &ls, &mn, &o) == KFLASH_ERROR_INVALID_ARGUMENT, "mean of 2");
  CHECK(strstr(kflash_last_error(), "mean (2) float64 must have one element") != NULL, "%s", kflash_last_error());
  CHECK(kflash_cross_entropy(KFLASH_MEMORY_HOST, &lg, NULL, &ls, NULL, &o) == KFLASH_ERROR_INVALID_ARGUMENT, "NULL");
  CHECK(strstr(kflash_last_error(), "kflash_cross_entropy: targets is NULL") != NULL, "%s", kflash_last_error());
  CHECK(kflash_cross_entropy_backward(KFLASH_MEMORY_HOST, &lf, &tg, &dl, &ou, NULL, &o) == KFLASH_ERROR_INVALID_ARGUMENT,
        "mixed types");
  CHECK(strstr(kflash_last_error(), "dloss (9) float64 must have dtype float32") != NULL, "%s",
        kflash_last_error());
  o.label_smoothing = 1.5;
  CHECK(kflash_cross_entropy_backward(KFLASH_MEMORY_HOST, &lg, &tg, &dl, &ou, NULL, &o) == KFLASH_ERROR_INVALID_ARGUMENT,
        "smoothing 1.5");
  CHECK(strstr(kflash_last_error(), "label_smoothing = 1.5") != NULL, "%s", kflash_last_error());
  o = options();
  o.struct_size = 4;
  CHECK(kflash_cross_entropy(KFLASH_MEMORY_HOST, &lg, &tg, &ls, NULL, &o) == KFLASH_ERROR_INVALID_ARGUMENT, "size 4");
  CHECK(strstr(kflash_last_error(), "options->struct_size = 4") != NULL, "%s", kflash_last_error());
  for (int r = 0; r < ROWS; ++r) {
    CHECK(loss[r] == -7, "loss[%d] written by a failed call", r);
    for (int c = 0; c < VOCAB; ++c) CHECK(out[r][c] == -7, "dlogits (%d, %d) written by a failed call", r, c);
  }
  CHECK(memcmp(x, logits, sizeof x) == 0, "the logits were written by a failed call");
}

int main(void) {
  CHECK(kflash_initialize() == KFLASH_SUCCESS, "%s", kflash_last_error());
  make_inputs();
  forward_f32();
  backward_f64();
  half_logits(0);
  half_logits(1);
  errors();
  CHECK(kflash_finalize() == KFLASH_SUCCESS, "%s", kflash_last_error());
  if (failures) fprintf(stderr, "%d failures\n", failures);
  else printf("all checks passed\n");
  return failures ? 1 : 0;
}
