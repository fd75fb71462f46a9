/* A user's C program: softmax of one row and attention of one query over three keys, each against
 * its closed form. */
#include <kflash/kflash.h>

#include <math.h>
#include <stdio.h>

int main(void) {
  if (kflash_initialize() != KFLASH_SUCCESS) return fprintf(stderr, "%s\n", kflash_last_error()), 1;
  double x[3] = {0, log(2.0), log(5.0)}, y[3];
  int ok = kflash_softmax_f64(KFLASH_MEMORY_HOST, 1, 3, x, 3, y, 3) == KFLASH_SUCCESS;
  ok = ok && fabs(y[0] - 0.125) < 1e-15 && fabs(y[1] - 0.25) < 1e-15 && fabs(y[2] - 0.625) < 1e-15;

  /* One query (1, 0) with scale 1 against keys (0, 0), (log 2, 0), (log 5, 0): the weights above. */
  double q[2] = {1, 0}, k[6] = {0, 0, log(2.0), 0, log(5.0), 0}, v[3] = {8, 16, 24}, o[1];
  kflash_array aq = {q, KFLASH_FLOAT64, 4, {1, 1, 1, 2}, {0}}, ak = {k, KFLASH_FLOAT64, 4, {1, 1, 3, 2}, {0}},
               av = {v, KFLASH_FLOAT64, 4, {1, 1, 3, 1}, {0}}, ao = {o, KFLASH_FLOAT64, 4, {1, 1, 1, 1}, {0}};
  kflash_attention_options opt;
  kflash_attention_options_init(&opt);
  opt.scale = 1;
  ok = ok && kflash_attention(KFLASH_MEMORY_HOST, &aq, &ak, &av, &ao, NULL, &opt) == KFLASH_SUCCESS;
  ok = ok && fabs(o[0] - (0.125 * 8 + 0.25 * 16 + 0.625 * 24)) < 1e-13;
  printf("kflash %s from C: softmax %.15g %.15g %.15g, attention %.15g: %s\n", kflash_version(), y[0], y[1], y[2], o[0],
         ok ? "ok" : kflash_last_error());
  kflash_finalize();
  return ok ? 0 : 1;
}
