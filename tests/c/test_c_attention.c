/* kflash_attention, kflash_merge_attention and kflash_attention_backward from C99, against a naive
 * long-double reference: fp32 GQA + causal with q and o in (B, N, H, D) memory (strides), fp64 with
 * a window, softcap and sinks, varlen, a merge of two key halves, an options struct of an older
 * (shorter) header, 16-bit q, k, v, o and their merge and gradients, the gradients with every
 * option of the fp64 case, and bad input: each error returns its status, names the argument and writes nothing. */
#include <kflash/kflash.h>

#include "c_check.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A contiguous row-major array descriptor. */
static kflash_array array(void* data, kflash_dtype dtype, int rank, const int64_t* extents) {
  kflash_array a;
  memset(&a, 0, sizeof a);
  a.data = data, a.dtype = dtype, a.rank = rank;
  for (int d = 0; d < rank; ++d) a.extent[d] = extents[d];
  return a;
}

/* One problem of the reference: element (b, h, i, d) of q at q[b*qs[0] + h*qs[1] + i*qs[2] + d*qs[3]]
 * and likewise for k, v and o (strides in elements); lse (B, Hq, Nq) contiguous. */
typedef struct problem {
  long B, Hq, Hk, Nq, Nk, D, Dv;
  long qs[4], ks[4], vs[4], os[4];
  long double scale, softcap;
  int causal, left, right;
  const long double* sinks; /* (Hq) or NULL */
} problem;

/* Reference attention in long double over the problem's visible keys (bottom-right aligned). */
static void reference(const problem* p, const double* q, const double* k, const double* v, long double* o,
                      long double* lse) {
  const long group = p->Hq / p->Hk;
  long double* s = malloc(sizeof(long double) * (size_t)(p->Nk > 0 ? p->Nk : 1));
  for (long b = 0; b < p->B; ++b)
    for (long h = 0; h < p->Hq; ++h)
      for (long i = 0; i < p->Nq; ++i) {
        const long c = i + p->Nk - p->Nq, hk = h / group;
        long double m = p->sinks ? p->sinks[h] : -INFINITY;
        for (long j = 0; j < p->Nk; ++j) {
          const int visible = (p->left < 0 || j >= c - p->left) && (p->causal ? j <= c : (p->right < 0 || j <= c + p->right));
          s[j] = -INFINITY;
          if (!visible) continue;
          long double raw = 0;
          for (long d = 0; d < p->D; ++d)
            raw += (long double)q[b * p->qs[0] + h * p->qs[1] + i * p->qs[2] + d * p->qs[3]] *
                   k[b * p->ks[0] + hk * p->ks[1] + j * p->ks[2] + d * p->ks[3]];
          raw *= p->scale;
          s[j] = p->softcap > 0 ? p->softcap * tanhl(raw / p->softcap) : raw;
          m = s[j] > m ? s[j] : m;
        }
        long double l = p->sinks && m > -INFINITY ? expl(p->sinks[h] - m) : 0;
        for (long j = 0; j < p->Nk; ++j) l += s[j] > -INFINITY ? expl(s[j] - m) : 0;
        for (long d = 0; d < p->Dv; ++d) {
          long double acc = 0;
          for (long j = 0; j < p->Nk; ++j)
            if (s[j] > -INFINITY) acc += expl(s[j] - m) * v[b * p->vs[0] + hk * p->vs[1] + j * p->vs[2] + d * p->vs[3]];
          o[b * p->os[0] + h * p->os[1] + i * p->os[2] + d * p->os[3]] = l > 0 ? acc / l : 0;
        }
        lse[(b * p->Hq + h) * p->Nq + i] = l > 0 ? m + logl(l) : -INFINITY;
      }
  free(s);
}

static void row_major(long* s, long e1, long e2, long e3) { s[3] = 1, s[2] = e3, s[1] = e2 * e3, s[0] = e1 * e2 * e3; }

/* The reference gradients of sum <dout, o> (FlashAttention 2's equations in long double, over the
 * problem's visible pairs, from the reference's own o and lse): P = exp(s - lse), dP = dout_i . v_j,
 * dS = P (dP - dout_i . o_i) times softcap's slope 1 - tanh^2 and the scale; dq_i += dS k_j,
 * dk_j += dS q_i, dv_j += P dout_i; dsinks_h -= exp(sink_h - lse) (dout_i . o_i). Contiguous
 * arrays; dq, dk, dv, dsinks zeroed here. */
static void reference_backward(const problem* p, const double* q, const double* k, const double* v, const double* dout,
                               long double* dq, long double* dk, long double* dv, long double* dsinks) {
  const long group = p->Hq / p->Hk, nq = p->B * p->Hq * p->Nq;
  long double* o = malloc(sizeof(long double) * (size_t)(nq * p->Dv + 1));
  long double* lse = malloc(sizeof(long double) * (size_t)(nq + 1));
  reference(p, q, k, v, o, lse);
  memset(dq, 0, sizeof(long double) * (size_t)(nq * p->D));
  memset(dk, 0, sizeof(long double) * (size_t)(p->B * p->Hk * p->Nk * p->D));
  memset(dv, 0, sizeof(long double) * (size_t)(p->B * p->Hk * p->Nk * p->Dv));
  if (dsinks) memset(dsinks, 0, sizeof(long double) * (size_t)p->Hq);
  for (long b = 0; b < p->B; ++b)
    for (long h = 0; h < p->Hq; ++h)
      for (long i = 0; i < p->Nq; ++i) {
        const long row = (b * p->Hq + h) * p->Nq + i, c = i + p->Nk - p->Nq, hk = h / group;
        if (lse[row] == -INFINITY) continue;
        long double delta = 0;
        for (long d = 0; d < p->Dv; ++d) delta += (long double)dout[row * p->Dv + d] * o[row * p->Dv + d];
        if (p->sinks && p->sinks[h] > -INFINITY) dsinks[h] -= expl(p->sinks[h] - lse[row]) * delta;
        for (long j = 0; j < p->Nk; ++j) {
          const int visible = (p->left < 0 || j >= c - p->left) && (p->causal ? j <= c : (p->right < 0 || j <= c + p->right));
          if (!visible) continue;
          const long key = (b * p->Hk + hk) * p->Nk + j;
          long double raw = 0, dp = 0;
          for (long d = 0; d < p->D; ++d) raw += (long double)q[row * p->D + d] * k[key * p->D + d];
          for (long d = 0; d < p->Dv; ++d) dp += (long double)dout[row * p->Dv + d] * v[key * p->Dv + d];
          raw *= p->scale;
          long double s = raw, slope = 1;
          if (p->softcap > 0) {
            const long double t = tanhl(raw / p->softcap);
            s = p->softcap * t, slope = 1 - t * t;
          }
          const long double pr = expl(s - lse[row]), ds = pr * (dp - delta) * slope * p->scale;
          for (long d = 0; d < p->D; ++d) {
            dq[row * p->D + d] += ds * k[key * p->D + d];
            dk[key * p->D + d] += ds * q[row * p->D + d];
          }
          for (long d = 0; d < p->Dv; ++d) dv[key * p->Dv + d] += pr * dout[row * p->Dv + d];
        }
      }
  free(o);
  free(lse);
}

/* max |x - ref| / max |ref| over n elements (0 when ref is all 0 and x matches). */
static double relative_error(const double* x, const long double* ref, long n) {
  long double err = 0, top = 0;
  for (long e = 0; e < n; ++e) {
    err = fmaxl(err, fabsl(x[e] - ref[e]));
    top = fmaxl(top, fabsl(ref[e]));
  }
  return (double)(top > 0 ? err / top : err);
}

/* kflash_attention_backward, fp64: GQA 4/2 causal with a window of 9, softcap and sinks, dsinks
 * asked for; the forward through kflash_attention. GUIDE §8's bound: max |error| / max |reference|
 * <= 1e-11 per gradient. Then errors: paged K/V, dq not shaped like q, dsinks without sinks, a
 * float32 dout; each returns its status, names the argument and writes nothing. */
static void attention_backward_f64(void) {
  enum { B = 1, HQ = 4, HK = 2, NQ = 23, NK = 31, D = 8, DV = 12 };
  problem p = {B, HQ, HK, NQ, NK, D, DV, {0}, {0}, {0}, {0}, 0.4L, 2.5L, 1, 9, -1, NULL};
  const long double sinks_ref[HQ] = {0.5L, -1.0L, 1.5L, -INFINITY};
  double sinks[HQ] = {0.5, -1.0, 1.5, -INFINITY};
  p.sinks = sinks_ref;
  row_major(p.qs, HQ, NQ, D), row_major(p.ks, HK, NK, D), row_major(p.vs, HK, NK, DV), row_major(p.os, HQ, NQ, DV);
  static double q[B * HQ * NQ * D], k[B * HK * NK * D], v[B * HK * NK * DV], o[B * HQ * NQ * DV], lse[B * HQ * NQ],
      dout[B * HQ * NQ * DV], dq[B * HQ * NQ * D], dk[B * HK * NK * D], dv[B * HK * NK * DV], dsinks[HQ];
  static long double rq[B * HQ * NQ * D], rk[B * HK * NK * D], rv[B * HK * NK * DV], rs[HQ];
  for (int i = 0; i < B * HQ * NQ * D; ++i) q[i] = uniform(-2, 2);
  for (int i = 0; i < B * HK * NK * D; ++i) k[i] = uniform(-2, 2);
  for (int i = 0; i < B * HK * NK * DV; ++i) v[i] = uniform(-1, 1);
  for (int i = 0; i < B * HQ * NQ * DV; ++i) dout[i] = uniform(-1, 1);
  reference_backward(&p, q, k, v, dout, rq, rk, rv, rs);
  const int64_t eq[4] = {B, HQ, NQ, D}, ek[4] = {B, HK, NK, D}, ev[4] = {B, HK, NK, DV}, eo[4] = {B, HQ, NQ, DV},
                el[3] = {B, HQ, NQ}, es[1] = {HQ};
  kflash_array aq = array(q, KFLASH_FLOAT64, 4, eq), ak = array(k, KFLASH_FLOAT64, 4, ek),
               av = array(v, KFLASH_FLOAT64, 4, ev), ao = array(o, KFLASH_FLOAT64, 4, eo),
               al = array(lse, KFLASH_FLOAT64, 3, el), ado = array(dout, KFLASH_FLOAT64, 4, eo),
               adq = array(dq, KFLASH_FLOAT64, 4, eq), adk = array(dk, KFLASH_FLOAT64, 4, ek),
               adv = array(dv, KFLASH_FLOAT64, 4, ev), ads = array(dsinks, KFLASH_FLOAT64, 1, es);
  kflash_attention_options opt;
  kflash_attention_options_init(&opt);
  opt.scale = 0.4, opt.softcap = 2.5, opt.causal = 1, opt.window_left = 9;
  opt.sinks = array(sinks, KFLASH_FLOAT64, 1, es);
  CHECK(kflash_attention(KFLASH_MEMORY_HOST, &aq, &ak, &av, &ao, &al, &opt) == KFLASH_SUCCESS, "%s",
        kflash_last_error());
  CHECK(kflash_attention_backward(KFLASH_MEMORY_HOST, &aq, &ak, &av, &ao, &al, &ado, &adq, &adk, &adv, &ads, NULL,
                                  &opt) == KFLASH_SUCCESS,
        "%s", kflash_last_error());
  const double eq_ = relative_error(dq, rq, B * HQ * NQ * D), ek_ = relative_error(dk, rk, B * HK * NK * D),
               ev_ = relative_error(dv, rv, B * HK * NK * DV), es_ = relative_error(dsinks, rs, HQ);
  CHECK(eq_ <= 1e-11 && ek_ <= 1e-11 && ev_ <= 1e-11 && es_ <= 1e-11,
        "attention_backward fp64: relative errors dq %g, dk %g, dv %g, dsinks %g", eq_, ek_, ev_, es_);

  // Errors: nothing written (dq, dk, dv, dsinks hold 7).
  for (int i = 0; i < B * HQ * NQ * D; ++i) dq[i] = 7;
  for (int i = 0; i < B * HK * NK * D; ++i) dk[i] = 7;
  for (int i = 0; i < B * HK * NK * DV; ++i) dv[i] = 7;
  for (int i = 0; i < HQ; ++i) dsinks[i] = 7;
  const int64_t ebad[4] = {B, HQ, NQ, D + 1}, etable[2] = {B, 1}, elens[1] = {B};
  kflash_array bad_dq = array(dq, KFLASH_FLOAT64, 4, ebad);
  float dout32[B * HQ * NQ * DV];
  kflash_array ado32 = array(dout32, KFLASH_FLOAT32, 4, eo);
  CHECK(kflash_attention_backward(KFLASH_MEMORY_HOST, &aq, &ak, &av, &ao, &al, &ado, &bad_dq, &adk, &adv, NULL, NULL,
                                  &opt) == KFLASH_ERROR_INVALID_ARGUMENT &&
            strstr(kflash_last_error(), "dq") != NULL,
        "dq not shaped like q: %s", kflash_last_error());
  CHECK(kflash_attention_backward(KFLASH_MEMORY_HOST, &aq, &ak, &av, &ao, &al, &ado32, &adq, &adk, &adv, NULL, NULL,
                                  &opt) == KFLASH_ERROR_INVALID_ARGUMENT &&
            strstr(kflash_last_error(), "dout") != NULL,
        "a float32 dout: %s", kflash_last_error());
  kflash_attention_options plain;
  kflash_attention_options_init(&plain);
  CHECK(kflash_attention_backward(KFLASH_MEMORY_HOST, &aq, &ak, &av, &ao, &al, &ado, &adq, &adk, &adv, &ads, NULL,
                                  &plain) == KFLASH_ERROR_INVALID_ARGUMENT &&
            strstr(kflash_last_error(), "dsinks") != NULL,
        "dsinks without sinks: %s", kflash_last_error());
  int64_t table[B] = {0}, lens[B] = {NK};
  kflash_attention_options paged;
  kflash_attention_options_init(&paged);
  paged.block_table = array(table, KFLASH_INT64, 2, etable);
  paged.cache_seqlens = array(lens, KFLASH_INT64, 1, elens);
  CHECK(kflash_attention_backward(KFLASH_MEMORY_HOST, &aq, &ak, &av, &ao, &al, &ado, &adq, &adk, &adv, NULL, NULL,
                                  &paged) == KFLASH_ERROR_INVALID_ARGUMENT &&
            strstr(kflash_last_error(), "paged") != NULL,
        "paged K/V: %s", kflash_last_error());
  int untouched = 1;
  for (int i = 0; i < B * HQ * NQ * D; ++i) untouched = untouched && dq[i] == 7;
  for (int i = 0; i < B * HK * NK * D; ++i) untouched = untouched && dk[i] == 7;
  for (int i = 0; i < B * HK * NK * DV; ++i) untouched = untouched && dv[i] == 7;
  for (int i = 0; i < HQ; ++i) untouched = untouched && dsinks[i] == 7;
  CHECK(untouched, "a failed kflash_attention_backward wrote a gradient");
}

/* fp32, GQA 4/2, causal with Nq < Nk, q and o held as (B, Nq, Hq, D) through strides. Tolerances:
 * o within 3e-6 (sum |p v| <= max |v| = 1), lse within 3e-6 (1 + |lse|). */
static void attention_f32_gqa_causal(void) {
  problem p = {2, 4, 2, 37, 53, 16, 24, {0}, {0}, {0}, {0}, 0, 0, 1, -1, -1, NULL};
  p.scale = 1 / sqrtl(16);
  p.qs[0] = p.Nq * p.Hq * p.D, p.qs[1] = p.D, p.qs[2] = p.Hq * p.D, p.qs[3] = 1; /* (B, N, H, D) memory */
  p.os[0] = p.Nq * p.Hq * p.Dv, p.os[1] = p.Dv, p.os[2] = p.Hq * p.Dv, p.os[3] = 1;
  row_major(p.ks, p.Hk, p.Nk, p.D), row_major(p.vs, p.Hk, p.Nk, p.Dv);
  const long nq = p.B * p.Hq * p.Nq * p.D, nk = p.B * p.Hk * p.Nk * p.D, nv = p.B * p.Hk * p.Nk * p.Dv,
             no = p.B * p.Hq * p.Nq * p.Dv, nl = p.B * p.Hq * p.Nq;
  float *q = malloc(sizeof(float) * nq), *k = malloc(sizeof(float) * nk), *v = malloc(sizeof(float) * nv),
        *o = malloc(sizeof(float) * no), *lse = malloc(sizeof(float) * nl);
  double *qd = malloc(sizeof(double) * nq), *kd = malloc(sizeof(double) * nk), *vd = malloc(sizeof(double) * nv);
  long double *ref = malloc(sizeof(long double) * no), *ref_lse = malloc(sizeof(long double) * nl);
  for (long i = 0; i < nq; ++i) qd[i] = q[i] = (float)uniform(-2, 2);
  for (long i = 0; i < nk; ++i) kd[i] = k[i] = (float)uniform(-2, 2);
  for (long i = 0; i < nv; ++i) vd[i] = v[i] = (float)uniform(-1, 1);
  reference(&p, qd, kd, vd, ref, ref_lse);

  const int64_t eq[4] = {2, 4, 37, 16}, ek[4] = {2, 2, 53, 16}, ev[4] = {2, 2, 53, 24}, eo[4] = {2, 4, 37, 24},
                el[3] = {2, 4, 37};
  kflash_array aq = array(q, KFLASH_FLOAT32, 4, eq), ak = array(k, KFLASH_FLOAT32, 4, ek),
               av = array(v, KFLASH_FLOAT32, 4, ev), ao = array(o, KFLASH_FLOAT32, 4, eo),
               al = array(lse, KFLASH_FLOAT32, 3, el);
  for (int d = 0; d < 4; ++d) aq.stride[d] = p.qs[d], ao.stride[d] = p.os[d];
  kflash_attention_options opt;
  kflash_attention_options_init(&opt);
  opt.causal = 1;
  CHECK(kflash_attention(KFLASH_MEMORY_HOST, &aq, &ak, &av, &ao, &al, &opt) == KFLASH_SUCCESS, "%s",
        kflash_last_error());
  double worst = 0, worst_lse = 0;
  for (long i = 0; i < no; ++i) worst = fmax(worst, (double)fabsl(o[i] - ref[i]));
  for (long i = 0; i < nl; ++i) worst_lse = fmax(worst_lse, (double)(fabsl(lse[i] - ref_lse[i]) / (1 + fabsl(ref_lse[i]))));
  CHECK(worst <= 3e-6, "fp32 GQA causal: worst |o - ref| %g", worst);
  CHECK(worst_lse <= 3e-6, "fp32 GQA causal: worst lse error %g", worst_lse);

  /* Without lse, and with options NULL (not causal): lse is optional, defaults apply. */
  p.causal = 0;
  reference(&p, qd, kd, vd, ref, ref_lse);
  CHECK(kflash_attention(KFLASH_MEMORY_HOST, &aq, &ak, &av, &ao, NULL, NULL) == KFLASH_SUCCESS, "%s",
        kflash_last_error());
  worst = 0;
  for (long i = 0; i < no; ++i) worst = fmax(worst, (double)fabsl(o[i] - ref[i]));
  CHECK(worst <= 3e-6, "fp32 GQA, default options: worst |o - ref| %g", worst);
  free(q), free(k), free(v), free(o), free(lse), free(qd), free(kd), free(vd), free(ref), free(ref_lse);
}

/* fp64, MQA (Hk = 1), window (left 5, right 2), softcap 3 and per-head sinks, one head's sink -inf;
 * o and lse within 1e-12 (relative to 1 + |value|). Its arrays are reused by the merge test. */
static void attention_f64_window_sinks(void) {
  problem p = {1, 3, 1, 20, 20, 8, 8, {0}, {0}, {0}, {0}, 0.3L, 3, 0, 5, 2, NULL};
  long double sinks_ref[3] = {0.5L, -INFINITY, 2.0L};
  double sinks[3] = {0.5, -INFINITY, 2.0};
  p.sinks = sinks_ref;
  row_major(p.qs, p.Hq, p.Nq, p.D), row_major(p.ks, p.Hk, p.Nk, p.D), row_major(p.vs, p.Hk, p.Nk, p.Dv);
  row_major(p.os, p.Hq, p.Nq, p.Dv);
  double q[3 * 20 * 8], k[20 * 8], v[20 * 8], o[3 * 20 * 8], lse[3 * 20];
  long double ref[3 * 20 * 8], ref_lse[3 * 20];
  for (int i = 0; i < 3 * 20 * 8; ++i) q[i] = uniform(-3, 3);
  for (int i = 0; i < 20 * 8; ++i) k[i] = uniform(-3, 3), v[i] = uniform(-1, 1);
  reference(&p, q, k, v, ref, ref_lse);
  const int64_t eq[4] = {1, 3, 20, 8}, ek[4] = {1, 1, 20, 8}, el[3] = {1, 3, 20}, es[1] = {3};
  kflash_array aq = array(q, KFLASH_FLOAT64, 4, eq), ak = array(k, KFLASH_FLOAT64, 4, ek),
               av = array(v, KFLASH_FLOAT64, 4, ek), ao = array(o, KFLASH_FLOAT64, 4, eq),
               al = array(lse, KFLASH_FLOAT64, 3, el);
  kflash_attention_options opt;
  kflash_attention_options_init(&opt);
  opt.scale = 0.3, opt.softcap = 3, opt.window_left = 5, opt.window_right = 2;
  opt.sinks = array(sinks, KFLASH_FLOAT64, 1, es);
  CHECK(kflash_attention(KFLASH_MEMORY_HOST, &aq, &ak, &av, &ao, &al, &opt) == KFLASH_SUCCESS, "%s",
        kflash_last_error());
  double worst = 0;
  for (int i = 0; i < 3 * 20 * 8; ++i) worst = fmax(worst, (double)(fabsl(o[i] - ref[i]) / (1 + fabsl(ref[i]))));
  for (int i = 0; i < 3 * 20; ++i) worst = fmax(worst, (double)(fabsl(lse[i] - ref_lse[i]) / (1 + fabsl(ref_lse[i]))));
  CHECK(worst <= 1e-12, "fp64 window, softcap, sinks: worst error %g", worst);
}

/* Varlen fp32: three packed sequences of 5, 0 and 11 queries over 7, 4 and 11 keys (int32
 * offsets), causal; each sequence against the reference of its own (tolerances as above). */
static void attention_varlen(void) {
  const long Hq = 2, Hk = 1, D = 8, Dv = 8, total_q = 16, total_k = 22;
  int32_t cu_q[4] = {0, 5, 5, 16}, cu_k[4] = {0, 7, 11, 22};
  float q[16 * 2 * 8], k[22 * 8], v[22 * 8], o[16 * 2 * 8], lse[2 * 16];
  double qd[16 * 2 * 8], kd[22 * 8], vd[22 * 8];
  for (int i = 0; i < 16 * 2 * 8; ++i) qd[i] = q[i] = (float)uniform(-2, 2);
  for (int i = 0; i < 22 * 8; ++i) kd[i] = k[i] = (float)uniform(-2, 2), vd[i] = v[i] = (float)uniform(-1, 1);
  const int64_t eq[3] = {total_q, Hq, D}, ek[3] = {total_k, Hk, D}, el[2] = {Hq, total_q}, ecu[1] = {4};
  kflash_array aq = array(q, KFLASH_FLOAT32, 3, eq), ak = array(k, KFLASH_FLOAT32, 3, ek),
               av = array(v, KFLASH_FLOAT32, 3, ek), ao = array(o, KFLASH_FLOAT32, 3, eq),
               al = array(lse, KFLASH_FLOAT32, 2, el);
  kflash_attention_options opt;
  kflash_attention_options_init(&opt);
  opt.causal = 1;
  opt.cu_seqlens_q = array(cu_q, KFLASH_INT32, 1, ecu);
  opt.cu_seqlens_k = array(cu_k, KFLASH_INT32, 1, ecu);
  CHECK(kflash_attention(KFLASH_MEMORY_HOST, &aq, &ak, &av, &ao, &al, &opt) == KFLASH_SUCCESS, "%s",
        kflash_last_error());
  double worst = 0;
  for (int b = 0; b < 3; ++b) {
    /* Sequence b as a batch of one: (B, H, N, D) strides over the packed (total, H, D) arrays. */
    problem p = {1, Hq, Hk, cu_q[b + 1] - cu_q[b], cu_k[b + 1] - cu_k[b], D, Dv,
                 {0, D, Hq * D, 1}, {0, D, Hk * D, 1}, {0, Dv, Hk * Dv, 1}, {0, Dv, Hq * Dv, 1},
                 1 / sqrtl(8), 0, 1, -1, -1, NULL};
    long double ref[16 * 2 * 8], ref_lse[2 * 16];
    reference(&p, qd + cu_q[b] * Hq * D, kd + cu_k[b] * Hk * D, vd + cu_k[b] * Hk * Dv, ref, ref_lse);
    for (long i = 0; i < p.Nq; ++i)
      for (long h = 0; h < Hq; ++h) {
        for (long d = 0; d < Dv; ++d)
          worst = fmax(worst, (double)fabsl(o[((cu_q[b] + i) * Hq + h) * Dv + d] - ref[i * Hq * Dv + h * Dv + d]));
        const long double r = ref_lse[h * p.Nq + i];
        worst = fmax(worst, (double)(fabsl(lse[h * total_q + cu_q[b] + i] - r) / (1 + fabsl(r))));
      }
  }
  CHECK(worst <= 3e-6, "varlen: worst error %g", worst);
}

/* Attention over two key halves (split at 29 of 64), merged, against attention over all keys:
 * fp64, within 1e-13. */
static void merge(void) {
  enum { H = 2, N = 9, Nk = 64, D = 8 };
  double q[H * N * D], k[H * Nk * D], v[H * Nk * D], parts[2 * H * N * D], part_lse[2 * H * N], o[H * N * D],
      lse[H * N], full[H * N * D], full_lse[H * N];
  for (int i = 0; i < H * N * D; ++i) q[i] = uniform(-2, 2);
  for (int i = 0; i < H * Nk * D; ++i) k[i] = uniform(-2, 2), v[i] = uniform(-1, 1);
  const int64_t eq[4] = {1, H, N, D}, ekv[4] = {1, H, Nk, D}, el[3] = {1, H, N}, eparts[5] = {2, 1, H, N, D},
                elparts[4] = {2, 1, H, N};
  kflash_array aq = array(q, KFLASH_FLOAT64, 4, eq), ak = array(k, KFLASH_FLOAT64, 4, ekv),
               av = array(v, KFLASH_FLOAT64, 4, ekv);
  kflash_array afull = array(full, KFLASH_FLOAT64, 4, eq), afull_lse = array(full_lse, KFLASH_FLOAT64, 3, el);
  CHECK(kflash_attention(KFLASH_MEMORY_HOST, &aq, &ak, &av, &afull, &afull_lse, NULL) == KFLASH_SUCCESS, "%s",
        kflash_last_error());
  for (int s = 0; s < 2; ++s) { /* keys [0, 29) and [29, 64) through extents and strides of k and v */
    kflash_array ks = ak, vs = av;
    const int64_t first = s == 0 ? 0 : 29;
    ks.extent[2] = vs.extent[2] = s == 0 ? 29 : Nk - 29;
    ks.stride[0] = H * Nk * D, ks.stride[1] = Nk * D, ks.stride[2] = D, ks.stride[3] = 1;
    vs.stride[0] = ks.stride[0], vs.stride[1] = ks.stride[1], vs.stride[2] = D, vs.stride[3] = 1;
    ks.data = k + first * D, vs.data = v + first * D;
    kflash_array ap = array(parts + s * H * N * D, KFLASH_FLOAT64, 4, eq),
                 alp = array(part_lse + s * H * N, KFLASH_FLOAT64, 3, el);
    CHECK(kflash_attention(KFLASH_MEMORY_HOST, &aq, &ks, &vs, &ap, &alp, NULL) == KFLASH_SUCCESS, "%s",
          kflash_last_error());
  }
  kflash_array aparts = array(parts, KFLASH_FLOAT64, 5, eparts), alparts = array(part_lse, KFLASH_FLOAT64, 4, elparts),
               ao = array(o, KFLASH_FLOAT64, 4, eq), al = array(lse, KFLASH_FLOAT64, 3, el);
  CHECK(kflash_merge_attention(KFLASH_MEMORY_HOST, &aparts, &alparts, &ao, &al) == KFLASH_SUCCESS, "%s",
        kflash_last_error());
  double worst = 0;
  for (int i = 0; i < H * N * D; ++i) worst = fmax(worst, fabs(o[i] - full[i]));
  for (int i = 0; i < H * N; ++i) worst = fmax(worst, fabs(lse[i] - full_lse[i]) / (1 + fabs(full_lse[i])));
  CHECK(worst <= 1e-13, "merge of two halves against one call: worst error %g", worst);
}

/* kflash_attention_backward on 16-bit q, k, v, o, dout, dq, dk, dv (values k / 64, exact in both
 * formats) with float32 lse and dsinks: GQA 4/2 causal with sinks. Against the long-double
 * gradients of the same values, whose D_i comes from the exact o (kflash's from the 16-bit o it
 * reads): per gradient within 2^-6 (bfloat16) or 2^-9 (float16) of max |reference|, four units of
 * the 16-bit rounding (o's in D_i, and the outputs'; measured: 0.0018-0.0030 and 0.0003-0.0006);
 * a 16-bit lse is refused. */
static void attention_backward_16_bit(int f16) {
  enum { B = 1, HQ = 4, HK = 2, NQ = 19, NK = 27, D = 8, DV = 8 };
  problem p = {B, HQ, HK, NQ, NK, D, DV, {0}, {0}, {0}, {0}, 0, 0, 1, -1, -1, NULL};
  p.scale = 1 / sqrtl(D);
  const long double sinks_ref[HQ] = {0.5L, -1.0L, 1.5L, 0.25L};
  float sinks[HQ] = {0.5f, -1.0f, 1.5f, 0.25f};
  p.sinks = sinks_ref;
  row_major(p.qs, HQ, NQ, D), row_major(p.ks, HK, NK, D), row_major(p.vs, HK, NK, DV), row_major(p.os, HQ, NQ, DV);
  enum { SQ = B * HQ * NQ * D, SK = B * HK * NK * D, SV = B * HK * NK * DV, SO = B * HQ * NQ * DV };
  static double qd[SQ], kd[SK], vd[SV], dod[SO], g[SQ + SK + SV + HQ];
  static uint16_t q[SQ], k[SK], v[SV], o[SO], dout[SO], dq[SQ], dk[SK], dv[SV];
  static long double rq[SQ], rk[SK], rv[SV], rs[HQ];
  float lse[B * HQ * NQ], dsinks[HQ];
  for (int i = 0; i < SQ; ++i) qd[i] = floor(uniform(-128, 129)) / 64, q[i] = encode16(qd[i], f16);
  for (int i = 0; i < SK; ++i) kd[i] = floor(uniform(-128, 129)) / 64, k[i] = encode16(kd[i], f16);
  for (int i = 0; i < SV; ++i) vd[i] = floor(uniform(-64, 65)) / 64, v[i] = encode16(vd[i], f16);
  for (int i = 0; i < SO; ++i) dod[i] = floor(uniform(-64, 65)) / 64, dout[i] = encode16(dod[i], f16);
  reference_backward(&p, qd, kd, vd, dod, rq, rk, rv, rs);
  const kflash_dtype type = f16 ? KFLASH_FLOAT16 : KFLASH_BFLOAT16;
  const int64_t eq[4] = {B, HQ, NQ, D}, ek[4] = {B, HK, NK, D}, ev[4] = {B, HK, NK, DV}, eo[4] = {B, HQ, NQ, DV},
                el[3] = {B, HQ, NQ}, es[1] = {HQ};
  kflash_array aq = array(q, type, 4, eq), ak = array(k, type, 4, ek), av = array(v, type, 4, ev),
               ao = array(o, type, 4, eo), al = array(lse, KFLASH_FLOAT32, 3, el), ado = array(dout, type, 4, eo),
               adq = array(dq, type, 4, eq), adk = array(dk, type, 4, ek), adv = array(dv, type, 4, ev),
               ads = array(dsinks, KFLASH_FLOAT32, 1, es);
  kflash_attention_options opt;
  kflash_attention_options_init(&opt);
  opt.causal = 1;
  opt.sinks = array(sinks, KFLASH_FLOAT32, 1, es);
  const char* name = f16 ? "float16" : "bfloat16";
  CHECK(kflash_attention(KFLASH_MEMORY_HOST, &aq, &ak, &av, &ao, &al, &opt) == KFLASH_SUCCESS, "%s: %s", name,
        kflash_last_error());
  CHECK(kflash_attention_backward(KFLASH_MEMORY_HOST, &aq, &ak, &av, &ao, &al, &ado, &adq, &adk, &adv, &ads, NULL,
                                  &opt) == KFLASH_SUCCESS,
        "%s: %s", name, kflash_last_error());
  for (int i = 0; i < SQ; ++i) g[i] = decode16(dq[i], f16);
  for (int i = 0; i < SK; ++i) g[SQ + i] = decode16(dk[i], f16);
  for (int i = 0; i < SV; ++i) g[SQ + SK + i] = decode16(dv[i], f16);
  for (int i = 0; i < HQ; ++i) g[SQ + SK + SV + i] = dsinks[i];
  const double eq_ = relative_error(g, rq, SQ), ek_ = relative_error(g + SQ, rk, SK),
               ev_ = relative_error(g + SQ + SK, rv, SV), es_ = relative_error(g + SQ + SK + SV, rs, HQ);
  const double bound = f16 ? 0x1p-9 : 0x1p-6;
  CHECK(eq_ <= bound && ek_ <= bound && ev_ <= bound && es_ <= bound,
        "%s attention_backward: relative errors dq %g, dk %g, dv %g, dsinks %g over %g", name, eq_, ek_, ev_, es_,
        bound);
  kflash_array al16 = array(o, type, 3, el);
  CHECK(kflash_attention_backward(KFLASH_MEMORY_HOST, &aq, &ak, &av, &ao, &al16, &ado, &adq, &adk, &adv, NULL, NULL,
                                  &opt) == KFLASH_ERROR_INVALID_ARGUMENT &&
            strstr(kflash_last_error(), "lse (1, 4, 19)") != NULL,
        "%s backward lse: %s", name, kflash_last_error());
  printf("%s attention_backward: relative errors dq %.3g, dk %.3g, dv %.3g, dsinks %.3g\n", name, eq_, ek_, ev_, es_);
}

/* 16-bit q, k, v, o (GQA, causal) with float32 lse, then a merge of two 16-bit parts: o within one
 * rounding of the 16-bit type (2^-8 of max |ref| for bfloat16, 2^-11 for float16) plus float's error;
 * lse of another dtype than float32 is refused. */
static void attention_16_bit(int f16) {
  problem p = {1, 4, 2, 20, 33, 16, 16, {0}, {0}, {0}, {0}, 0, 0, 1, -1, -1, NULL};
  p.scale = 1 / sqrtl(16);
  row_major(p.qs, p.Hq, p.Nq, p.D), row_major(p.ks, p.Hk, p.Nk, p.D), row_major(p.vs, p.Hk, p.Nk, p.Dv);
  row_major(p.os, p.Hq, p.Nq, p.Dv);
  enum { NQ = 4 * 20 * 16, NK = 2 * 33 * 16, NL = 4 * 20 };
  uint16_t q[NQ], k[NK], v[NK], o[NQ], parts[2 * NQ];
  double qd[NQ], kd[NK], vd[NK];
  float lse[NL], part_lse[2 * NL];
  long double ref[NQ], ref_lse[NL];
  for (int i = 0; i < NQ; ++i) qd[i] = floor(uniform(-128, 129)) / 64, q[i] = encode16(qd[i], f16), o[i] = 0x7E00;
  for (int i = 0; i < NK; ++i) kd[i] = floor(uniform(-128, 129)) / 64, k[i] = encode16(kd[i], f16);
  for (int i = 0; i < NK; ++i) vd[i] = floor(uniform(-64, 65)) / 64, v[i] = encode16(vd[i], f16);
  reference(&p, qd, kd, vd, ref, ref_lse);
  const kflash_dtype type = f16 ? KFLASH_FLOAT16 : KFLASH_BFLOAT16;
  const int64_t eq[4] = {1, 4, 20, 16}, ek[4] = {1, 2, 33, 16}, el[3] = {1, 4, 20}, eparts[5] = {2, 1, 4, 20, 16},
                elparts[4] = {2, 1, 4, 20};
  kflash_array aq = array(q, type, 4, eq), ak = array(k, type, 4, ek), av = array(v, type, 4, ek),
               ao = array(o, type, 4, eq), al = array(lse, KFLASH_FLOAT32, 3, el);
  kflash_attention_options opt;
  kflash_attention_options_init(&opt);
  opt.causal = 1;
  CHECK(kflash_attention(KFLASH_MEMORY_HOST, &aq, &ak, &av, &ao, &al, &opt) == KFLASH_SUCCESS, "%s",
        kflash_last_error());
  const char* name = f16 ? "float16" : "bfloat16";
  long double max_ref = 0;
  for (int i = 0; i < NQ; ++i) max_ref = fmaxl(max_ref, fabsl(ref[i]));
  double bound = (double)(ldexpl(max_ref, f16 ? -11 : -8) + 1e-5L);
  double worst = 0, worst_lse = 0;
  for (int i = 0; i < NQ; ++i) worst = fmax(worst, (double)fabsl(decode16(o[i], f16) - ref[i]));
  for (int i = 0; i < NL; ++i)
    worst_lse = fmax(worst_lse, (double)(fabsl(lse[i] - ref_lse[i]) / (1 + fabsl(ref_lse[i]))));
  CHECK(worst <= bound, "%s attention: worst |o - ref| %g over %g", name, worst, bound);
  CHECK(worst_lse <= 3e-6, "%s attention: worst lse error %g", name, worst_lse);

  /* Keys [0, 15) and [15, 33) into 16-bit parts (not causal), merged: each part and the result
   * rounded once. */
  p.causal = 0, opt.causal = 0;
  reference(&p, qd, kd, vd, ref, ref_lse);
  max_ref = 0;
  for (int i = 0; i < NQ; ++i) max_ref = fmaxl(max_ref, fabsl(ref[i]));
  bound = (double)(ldexpl(max_ref, f16 ? -11 : -8) + 1e-5L);
  for (int s = 0; s < 2; ++s) {
    kflash_array ks = ak, vs = av;
    const int64_t first = s == 0 ? 0 : 15;
    ks.extent[2] = vs.extent[2] = s == 0 ? 15 : 33 - 15;
    ks.stride[0] = vs.stride[0] = 2 * 33 * 16, ks.stride[1] = vs.stride[1] = 33 * 16;
    ks.stride[2] = vs.stride[2] = 16, ks.stride[3] = vs.stride[3] = 1;
    ks.data = k + first * 16, vs.data = v + first * 16;
    kflash_array ap = array(parts + s * NQ, type, 4, eq), alp = array(part_lse + s * NL, KFLASH_FLOAT32, 3, el);
    CHECK(kflash_attention(KFLASH_MEMORY_HOST, &aq, &ks, &vs, &ap, &alp, &opt) == KFLASH_SUCCESS, "%s",
          kflash_last_error());
  }
  double max_part = 0;
  for (int i = 0; i < 2 * NQ; ++i) max_part = fmax(max_part, fabs(decode16(parts[i], f16)));
  kflash_array aparts = array(parts, type, 5, eparts), alparts = array(part_lse, KFLASH_FLOAT32, 4, elparts);
  CHECK(kflash_merge_attention(KFLASH_MEMORY_HOST, &aparts, &alparts, &ao, &al) == KFLASH_SUCCESS, "%s",
        kflash_last_error());
  worst = 0;
  for (int i = 0; i < NQ; ++i) worst = fmax(worst, (double)fabsl(decode16(o[i], f16) - ref[i]));
  const double merge_bound = bound + ldexp(max_part, f16 ? -11 : -8);
  CHECK(worst <= merge_bound, "%s merge: worst |o - ref| %g over %g", name, worst, merge_bound);

  /* lse in the 16-bit type, and a 16-bit option array, are refused. */
  kflash_array al16 = array(o, type, 3, el);
  CHECK(kflash_attention(KFLASH_MEMORY_HOST, &aq, &ak, &av, &ao, &al16, &opt) == KFLASH_ERROR_INVALID_ARGUMENT &&
            strstr(kflash_last_error(), "lse (1, 4, 20)") != NULL && strstr(kflash_last_error(), "float32") != NULL,
        "%s lse: %s", name, kflash_last_error());
  const int64_t eh[1] = {4};
  opt.sinks = array(q, type, 1, eh);
  CHECK(kflash_attention(KFLASH_MEMORY_HOST, &aq, &ak, &av, &ao, &al, &opt) == KFLASH_ERROR_INVALID_ARGUMENT &&
            strstr(kflash_last_error(), "sinks (4)") != NULL,
        "%s sinks: %s", name, kflash_last_error());
}

/* A program built against an older header passes a shorter struct: the fields it covers count, the
 * later ones keep their defaults (here: causal set, the sinks field beyond its size ignored). */
static void older_options(void) {
  float q[2 * 4] = {1, 0, 0, 1, 1, 1, 0, 0}, k[3 * 4] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0},
        v[3 * 4] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, o_old[2 * 4], o_new[2 * 4];
  float sinks[1] = {100};
  const int64_t eq[4] = {1, 1, 2, 4}, ek[4] = {1, 1, 3, 4}, es[1] = {1};
  kflash_array aq = array(q, KFLASH_FLOAT32, 4, eq), ak = array(k, KFLASH_FLOAT32, 4, ek),
               av = array(v, KFLASH_FLOAT32, 4, ek), ao_old = array(o_old, KFLASH_FLOAT32, 4, eq),
               ao_new = array(o_new, KFLASH_FLOAT32, 4, eq);
  kflash_attention_options opt;
  kflash_attention_options_init(&opt);
  opt.causal = 1;
  CHECK(kflash_attention(KFLASH_MEMORY_HOST, &aq, &ak, &av, &ao_new, NULL, &opt) == KFLASH_SUCCESS, "%s",
        kflash_last_error());
  opt.sinks = array(sinks, KFLASH_FLOAT32, 1, es); /* beyond the older struct's size */
  opt.struct_size = offsetof(kflash_attention_options, alibi_slopes);
  CHECK(kflash_attention(KFLASH_MEMORY_HOST, &aq, &ak, &av, &ao_old, NULL, &opt) == KFLASH_SUCCESS, "%s",
        kflash_last_error());
  CHECK(memcmp(o_old, o_new, sizeof o_old) == 0, "a shorter options struct gave another result");
}

/* Bad input: the status, a message naming the argument, and o untouched. */
static void errors(void) {
  float q[2 * 3 * 4 * 8], k[2 * 2 * 5 * 8], v[2 * 2 * 5 * 8], o[2 * 3 * 4 * 8], lse[2 * 3 * 4];
  for (int i = 0; i < 2 * 3 * 4 * 8; ++i) q[i] = 0.5f, o[i] = 7.0f;
  for (int i = 0; i < 2 * 2 * 5 * 8; ++i) k[i] = v[i] = 0.25f;
  for (int i = 0; i < 2 * 3 * 4; ++i) lse[i] = 7.0f;
  const int64_t eq[4] = {2, 3, 4, 8}, ek[4] = {2, 2, 5, 8}, el[3] = {2, 3, 4};
  kflash_array aq = array(q, KFLASH_FLOAT32, 4, eq), ak = array(k, KFLASH_FLOAT32, 4, ek),
               av = array(v, KFLASH_FLOAT32, 4, ek), ao = array(o, KFLASH_FLOAT32, 4, eq),
               al = array(lse, KFLASH_FLOAT32, 3, el);
  kflash_attention_options opt;
  kflash_attention_options_init(&opt);
  /* Hq = 3 is not a multiple of Hk = 2. */
  CHECK(kflash_attention(KFLASH_MEMORY_HOST, &aq, &ak, &av, &ao, &al, &opt) == KFLASH_ERROR_INVALID_ARGUMENT,
        "Hq not a multiple of Hk");
  CHECK(strstr(kflash_last_error(), "Hq") != NULL && strstr(kflash_last_error(), "Hk") != NULL, "%s",
        kflash_last_error());
  /* Mismatched extents: v's D of 7 rows against k's 5 keys. */
  ak.extent[1] = av.extent[1] = 1;
  kflash_array bad_v = av;
  bad_v.extent[2] = 4;
  CHECK(kflash_attention(KFLASH_MEMORY_HOST, &aq, &ak, &bad_v, &ao, &al, &opt) == KFLASH_ERROR_INVALID_ARGUMENT,
        "mismatched extents");
  CHECK(strstr(kflash_last_error(), "v (2, 1, 4, 8)") != NULL, "%s", kflash_last_error());
  /* Every message begins with the C function's name, also those of the C++ layer's checks. */
  CHECK(strncmp(kflash_last_error(), "kflash_attention: ", 18) == 0 && strstr(kflash_last_error(), "kflash::") == NULL,
        "%s", kflash_last_error());
  /* lse of the wrong shape. */
  kflash_array bad_lse = al;
  bad_lse.extent[2] = 3;
  CHECK(kflash_attention(KFLASH_MEMORY_HOST, &aq, &ak, &av, &ao, &bad_lse, &opt) == KFLASH_ERROR_INVALID_ARGUMENT,
        "lse shape");
  CHECK(strstr(kflash_last_error(), "lse") != NULL, "%s", kflash_last_error());
  /* Null pointers: an array, an array's data. */
  CHECK(kflash_attention(KFLASH_MEMORY_HOST, &aq, NULL, &av, &ao, &al, &opt) == KFLASH_ERROR_INVALID_ARGUMENT,
        "null k");
  CHECK(strstr(kflash_last_error(), "kflash_attention: k is NULL") != NULL, "%s", kflash_last_error());
  kflash_array null_q = aq;
  null_q.data = NULL;
  CHECK(kflash_attention(KFLASH_MEMORY_HOST, &null_q, &ak, &av, &ao, &al, &opt) == KFLASH_ERROR_INVALID_ARGUMENT,
        "null q data");
  CHECK(strstr(kflash_last_error(), "q (2, 3, 4, 8) float32 has elements but its data is NULL") != NULL, "%s",
        kflash_last_error());
  /* An output whose strides would write its elements over each other. */
  kflash_array overlapping_o = ao;
  overlapping_o.stride[0] = 96, overlapping_o.stride[1] = 32, overlapping_o.stride[2] = 0, overlapping_o.stride[3] = 1;
  CHECK(kflash_attention(KFLASH_MEMORY_HOST, &aq, &ak, &av, &overlapping_o, &al, &opt) == KFLASH_ERROR_INVALID_ARGUMENT,
        "o with a zero stride");
  CHECK(strstr(kflash_last_error(), "o (2, 3, 4, 8) float32 is written, and a stride of 0") != NULL, "%s",
        kflash_last_error());
  /* Mixed types, a bad rank, a bad option, options not set up, a bad schedule. */
  kflash_array f64_k = ak;
  f64_k.dtype = KFLASH_FLOAT64;
  CHECK(kflash_attention(KFLASH_MEMORY_HOST, &aq, &f64_k, &av, &ao, &al, &opt) == KFLASH_ERROR_INVALID_ARGUMENT,
        "mixed dtypes");
  CHECK(strstr(kflash_last_error(), "must have dtype float32 (the first array's") != NULL, "%s",
        kflash_last_error());
  kflash_array rank2 = aq;
  rank2.rank = 2;
  CHECK(kflash_attention(KFLASH_MEMORY_HOST, &rank2, &ak, &av, &ao, &al, &opt) == KFLASH_ERROR_INVALID_ARGUMENT,
        "rank 2 q");
  CHECK(strstr(kflash_last_error(), "must have rank 4") != NULL, "%s", kflash_last_error());
  double sinks[2] = {0, 0};
  const int64_t es[1] = {2};
  opt.sinks = array(sinks, KFLASH_FLOAT64, 1, es);
  CHECK(kflash_attention(KFLASH_MEMORY_HOST, &aq, &ak, &av, &ao, &al, &opt) == KFLASH_ERROR_INVALID_ARGUMENT,
        "sinks of another type and length");
  CHECK(strstr(kflash_last_error(), "options.sinks") != NULL, "%s", kflash_last_error());
  kflash_attention_options zeroed;
  memset(&zeroed, 0, sizeof zeroed);
  CHECK(kflash_attention(KFLASH_MEMORY_HOST, &aq, &ak, &av, &ao, &al, &zeroed) == KFLASH_ERROR_INVALID_ARGUMENT,
        "options without init");
  CHECK(strstr(kflash_last_error(), "kflash_attention_options_init") != NULL, "%s", kflash_last_error());
  kflash_attention_options_init(&opt);
  opt.schedule = (kflash_schedule)9;
  CHECK(kflash_attention(KFLASH_MEMORY_HOST, &aq, &ak, &av, &ao, &al, &opt) == KFLASH_ERROR_INVALID_ARGUMENT,
        "bad schedule");
  CHECK(strstr(kflash_last_error(), "options->schedule = 9") != NULL, "%s", kflash_last_error());
  /* Merge: parts that do not match o. */
  const int64_t eparts[5] = {2, 1, 3, 4, 8}, elparts[4] = {2, 1, 3, 4}; /* within q's and lse's elements */
  kflash_array aparts = array(q, KFLASH_FLOAT32, 5, eparts), alparts = array(lse, KFLASH_FLOAT32, 4, elparts);
  CHECK(kflash_merge_attention(KFLASH_MEMORY_HOST, &aparts, &alparts, &ao, &al) == KFLASH_ERROR_INVALID_ARGUMENT,
        "merge shapes");
  CHECK(strstr(kflash_last_error(), "lse_parts") != NULL, "%s", kflash_last_error());
  CHECK(kflash_merge_attention(KFLASH_MEMORY_HOST, &aparts, &alparts, &ao, NULL) == KFLASH_ERROR_INVALID_ARGUMENT,
        "merge without lse");
  CHECK(strstr(kflash_last_error(), "lse is NULL") != NULL, "%s", kflash_last_error());
  int untouched = 1;
  for (int i = 0; i < 2 * 3 * 4 * 8; ++i) untouched = untouched && o[i] == 7.0f;
  for (int i = 0; i < 2 * 3 * 4; ++i) untouched = untouched && lse[i] == 7.0f;
  CHECK(untouched, "a failed call wrote o or lse");
}

int main(void) {
  CHECK(kflash_initialize() == KFLASH_SUCCESS, "%s", kflash_last_error());
  attention_f32_gqa_causal();
  attention_f64_window_sinks();
  attention_varlen();
  merge();
  attention_16_bit(0);
  attention_16_bit(1);
  attention_backward_16_bit(0);
  attention_backward_16_bit(1);
  older_options();
  errors();
  attention_backward_f64();
  CHECK(kflash_finalize() == KFLASH_SUCCESS, "%s", kflash_last_error());
  if (failures) fprintf(stderr, "%d failures\n", failures);
  else printf("all checks passed\n");
  return failures ? 1 : 0;
}
