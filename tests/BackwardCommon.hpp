// What the attention backward tests share: the gradients in long double, and their bound.
#pragma once

#include <AttentionCommon.hpp>

#include <cmath>
#include <string>
#include <vector>

namespace kflash_test {

/// dq, dk, dv in logical (b, h, n, d) order; dsinks (Hq) and dbias (the bias's shape, row-major)
/// where the terms have sinks and a bias.
struct AttnGrads {
  std::vector<ld> dq, dk, dv, dsinks, dbias;
};

/// The gradients of sum <dout, o> in long double: per visible pair P = exp(x - lse), dP = dout_i .
/// v_j, dS = P (dP - D_i) slope, D_i = dout_i . o_i; dq_i += dS scale k_j, dk_j += dS scale q_i,
/// dv_j += P dout_i; the bias entry of the pair += P (dP - D_i) mod_slope; dsinks_h -= exp(sink_h -
/// lse) D_i per row. o_read: the forward output the call reads (e.g. rounded to 16 bits), for D_i;
/// by default the reference forward's.
template <class T>
AttnGrads reference_attention_backward(const AttnData<T>& a, ld scale, const RefTerms& t, const std::vector<ld>& dout,
                                       const std::vector<ld>* o_read = nullptr) {
  const AttnShape& s = a.s;
  const AttnRef f = reference_attention(a, scale, t);
  AttnGrads g;
  g.dq.assign(s.B * s.Hq * s.Nq * s.D, 0);
  g.dk.assign(s.B * s.Hk * s.Nk * s.D, 0);
  g.dv.assign(s.B * s.Hk * s.Nk * s.Dv, 0);
  g.dsinks.assign(t.sinks.size(), 0);
  g.dbias.assign(t.bias.size(), 0);
  for (std::size_t b = 0; b < s.B; ++b)
    for (std::size_t h = 0; h < s.Hq; ++h) {
      const std::size_t hk = h / (s.Hq / s.Hk);
      for (std::size_t i = 0; i < s.Nq; ++i) {
        const std::size_t row = (b * s.Hq + h) * s.Nq + i;
        const ld lse = f.lse[row];
        if (lse == -inf<ld>) continue;
        const ld* dO = &dout[row * s.Dv];
        ld delta = 0;
        const std::vector<ld>& o = o_read ? *o_read : f.o;
        for (std::size_t d = 0; d < s.Dv; ++d) delta += dO[d] * o[row * s.Dv + d];
        if (t.sinks.size()) g.dsinks[h] -= std::exp(t.sinks[h] - lse) * delta;
        for (std::size_t j = 0; j < s.Nk; ++j) {
          const RefPair pair = reference_pair(a, scale, t, b, h, i, j);
          if (!pair.seen) continue;
          const std::size_t key = (b * s.Hk + hk) * s.Nk + j;
          const ld p = std::exp(pair.x - lse);
          ld dp = 0;
          for (std::size_t d = 0; d < s.Dv; ++d) dp += dO[d] * ld(a.v[key * s.Dv + d]);
          if (t.bias.size())
            g.dbias[(((t.bias_b > 1 ? b : 0) * t.bias_h + (t.bias_h > 1 ? h : 0)) * s.Nq + i) * s.Nk + j] +=
                p * (dp - delta) * pair.mod_slope;
          const ld ds = p * (dp - delta) * pair.slope * scale;
          for (std::size_t d = 0; d < s.D; ++d) {
            g.dq[row * s.D + d] += ds * ld(a.k[key * s.D + d]);
            g.dk[key * s.D + d] += ds * ld(a.q[row * s.D + d]);
          }
          for (std::size_t d = 0; d < s.Dv; ++d) g.dv[key * s.Dv + d] += p * dO[d];
        }
      }
    }
  return g;
}

/// Per gradient: max |error| / max |reference| <= rel; a gradient whose reference is all 0 must be
/// exactly 0. Never NaN.
inline void expect_grads_within(const AttnGrads& ref, const AttnGrads& got, ld rel, const std::string& what) {
  const std::pair<const char*, std::pair<const std::vector<ld>*, const std::vector<ld>*>> grads[] = {
      {"dq", {&ref.dq, &got.dq}},
      {"dk", {&ref.dk, &got.dk}},
      {"dv", {&ref.dv, &got.dv}},
      {"dsinks", {&ref.dsinks, &got.dsinks}},
      {"dbias", {&ref.dbias, &got.dbias}}};
  for (const auto& g : grads) {
    const std::vector<ld>& r = *g.second.first;
    const std::vector<ld>& x = *g.second.second;
    ASSERT_EQ(r.size(), x.size()) << what << " " << g.first;
    ld max_ref = 0, err = 0;
    std::size_t worst = 0;
    for (std::size_t n = 0; n < r.size(); ++n) {
      ASSERT_FALSE(std::isnan(x[n])) << what << " " << g.first << " element " << n << " is NaN";
      max_ref = std::max(max_ref, std::fabs(r[n]));
      if (std::fabs(x[n] - r[n]) > err) err = std::fabs(x[n] - r[n]), worst = n;
    }
    EXPECT_LE(err, rel * max_ref) << what << " " << g.first << ": element " << worst << " is " << x[worst]
                                  << ", reference " << r[worst] << " (max |reference| " << max_ref << ")";
  }
}

/// GUIDE §8's bound: rel 1e-4 (fp32), 1e-11 (fp64).
template <class T>
void expect_grads_match(const AttnGrads& ref, const AttnGrads& got, const std::string& what) {
  expect_grads_within(ref, got, std::is_same<T, float>::value ? 1e-4L : 1e-11L, what);
}

}  // namespace kflash_test
