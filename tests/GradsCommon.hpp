// What the gradient tests share: each row operation's gradient in long double, with the magnitude
// its rounding errors scale with.
#pragma once

#include <CrossEntropyCommon.hpp>
#include <HalfCommon.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace kflash_test {

/// One row's gradient in long double from the row's inputs as the calls get them, with each
/// element's condition: the magnitude its rounding errors scale with (the terms a difference cancels).
struct RefGrad {
  std::vector<ld> dx, magnitude;
};
struct RefGrads {
  /// dx = y (dy - s), s = sum dy y; magnitude |y| (|dy| + sum |dy y|).
  static RefGrad softmax(const std::vector<ld>& y, const std::vector<ld>& dy) {
    ld s = 0, abs_s = 0;
    for (std::size_t i = 0; i < y.size(); ++i) s += dy[i] * y[i], abs_s += std::fabs(dy[i] * y[i]);
    RefGrad g;
    for (std::size_t i = 0; i < y.size(); ++i) {
      g.dx.push_back(y[i] * (dy[i] - s));
      g.magnitude.push_back(std::fabs(y[i]) * (std::fabs(dy[i]) + abs_s));
    }
    return g;
  }
  /// dx = dy - exp(y) s, s = sum dy; magnitude |dy| + exp(y) (sum |dy|) (1 + |y|).
  static RefGrad log_softmax(const std::vector<ld>& y, const std::vector<ld>& dy) {
    ld s = 0, abs_s = 0;
    for (ld g : dy) s += g, abs_s += std::fabs(g);
    RefGrad g;
    for (std::size_t i = 0; i < y.size(); ++i) {
      g.dx.push_back(dy[i] - std::exp(y[i]) * s);
      const ld e = std::exp(y[i]);  // 0 for y = -inf, whose term is then exactly 0
      g.magnitude.push_back(std::fabs(dy[i]) + (e == 0 ? ld(0) : e * abs_s * (1 + std::fabs(y[i]))));
    }
    return g;
  }
  /// dx = dlse exp(x - lse) (0 where x = lse = -inf, dlse where x = lse = +inf); magnitude
  /// |dx| (1 + |x| + |lse|), exp's argument being a difference of the two.
  static RefGrad logsumexp(const std::vector<ld>& x, ld lse, ld dlse) {
    RefGrad g;
    for (ld v : x) {
      const ld d = std::isinf(lse) && v == lse ? (lse > 0 ? dlse : ld(0)) : dlse * std::exp(v - lse);
      g.dx.push_back(d);
      g.magnitude.push_back(std::fabs(d) * (1 + (std::isfinite(v) ? std::fabs(v) + std::fabs(lse) : 0)));
    }
    return g;
  }
};

/// Cross-entropy's gradient of one row in long double (GUIDE §8), dloss g: g ((1 + 2 z lse) p_c -
/// eps / C - (1 - eps) [c = t]); 0 for an ignored row, NaN where lse is not finite. The magnitude of
/// each element: its terms' sizes, p_c's scaled by 1 + |x_c| + |lse| (exp's argument is their
/// difference).
template <class T>
RefGrad reference_ce_grad(const T* x, std::size_t cols, std::int64_t t, ld g, const kflash::CrossEntropyOptions& o) {
  RefGrad out;
  const RefRow row = reference_row(x, cols);
  const ld lse = row.lse(), eps_s = ld(o.label_smoothing), z = ld(o.z_loss);
  for (std::size_t c = 0; c < cols; ++c) {
    if (t == o.ignore_index) {
      out.dx.push_back(0);
      out.magnitude.push_back(0);
      continue;
    }
    if (!std::isfinite(lse)) {
      out.dx.push_back(nan<ld>);
      out.magnitude.push_back(0);
      continue;
    }
    const ld p = std::exp(ld(x[c]) - lse), w = g * (1 + 2 * z * lse);
    const ld hit = std::int64_t(c) == t ? g * (1 - eps_s) : 0;
    out.dx.push_back(w * p - g * eps_s / ld(cols) - hit);
    out.magnitude.push_back(std::fabs(w) * p * (1 + (std::isfinite(ld(x[c])) ? std::fabs(ld(x[c])) : 0) + std::fabs(lse)) +
                            std::fabs(g) * eps_s / ld(cols) + std::fabs(hit));
  }
  return out;
}

/// Checks got against ref row by row: NaN where ref is NaN, the same infinity where ref is
/// infinite, else |error| <= 64 eps of T (the call's arithmetic) times the element's magnitude
/// (plus T's smallest normal), plus one unit in the last place of S where the outputs are stored in
/// 16 bits.
template <class T, class S = T>
void expect_grad_rows(const std::vector<RefGrad>& ref, const std::vector<S>& got, std::size_t cols,
                      const std::string& where) {
  const ld tol = 64 * eps<T>;
  for (std::size_t r = 0; r < ref.size(); ++r) {
    for (std::size_t c = 0; c < cols; ++c) {
      const ld want = ref[r].dx[c], have = wide(got[r * cols + c]);
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(have)) << where << " row " << r << " col " << c << ": got " << have << ", want NaN";
      } else if (std::isinf(want)) {
        ASSERT_EQ(have, want) << where << " row " << r << " col " << c;
      } else {
        ld bound = tol * ref[r].magnitude[c] + std::numeric_limits<T>::min();
        if constexpr (kflash::impl::is_half_type<S>) bound += Half16<S>::ulp(want);
        ASSERT_LE(std::fabs(have - want), bound)
            << where << " row " << r << " col " << c << ": got " << have << ", want " << want;
      }
    }
  }
}

/// The reference gradients of softmax (or log_softmax) rows: a = y, b = dy, as the call reads them.
template <class S>
std::vector<RefGrad> ref_rows(const std::vector<S>& a, const std::vector<S>& b, std::size_t cols, bool log_space) {
  const std::vector<ld> wa = wide_all(a), wb = wide_all(b);
  std::vector<RefGrad> out;
  for (std::size_t r = 0; r * cols < a.size(); ++r) {
    const std::vector<ld> ya(wa.begin() + r * cols, wa.begin() + (r + 1) * cols);
    const std::vector<ld> gb(wb.begin() + r * cols, wb.begin() + (r + 1) * cols);
    out.push_back(log_space ? RefGrads::log_softmax(ya, gb) : RefGrads::softmax(ya, gb));
  }
  return out;
}

}  // namespace kflash_test
