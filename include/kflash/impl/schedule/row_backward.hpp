// The gradients of the row operations (GUIDE §8), the portable schedule (host spaces take
// host/host_row_backward.hpp for contiguous rows): a team per
// row reduces the row's sum across its threads (Σ dy·y for softmax, Σ dy for log_softmax: each tile
// of Traits::tile elements summed plainly over the lanes Traits::tile_lanes names, the tiles' sums
// compensated and merged in a fixed order), then writes dx; logsumexp's gradient needs no sum.
#pragma once

#include <kflash/impl/schedule/rows.hpp>

namespace kflash::impl {

/// Which gradient RowBackwardKernel computes.
enum class RowGrad { softmax, log_softmax, logsumexp };

/// The per-row scalars of the gradients that take none.
struct NoRowScalars {};

/// The value of a row's compensated sum (a SoftmaxState whose maximum stays -inf): an infinite sum
/// keeps its sign (its compensation is NaN: inf - inf); NaN stays NaN.
template <class T>
KOKKOS_INLINE_FUNCTION T compensated_value(const SoftmaxState<T>& sum) {
  return sum.sum - sum.sum == T(0) ? sum.total() : sum.sum;
}

/// logsumexp's gradient of one element: dlse · exp(x − lse), weighing 0 where x = lse = −inf and 1
/// where x = lse = +inf (the infinities' difference is NaN), as the forward's weights do; NaN in x
/// or lse never compares equal and gives NaN.
template <class T>
KOKKOS_INLINE_FUNCTION T lse_grad_element(T x, T lse, T dlse) {
  return dlse * (x == lse ? T(lse != -infinity<T>()) : exp(x - lse));
}

/// Row r of dx from row r of a and b, given rows of rank 1 or 2 (Rows) and per-row scalars of rank
/// 0 or 1 (LseOut, read only here):
///  softmax:     a = y, b = dy:  dx = y (dy − Σ dy·y)
///  log_softmax: a = y, b = dy:  dx = dy − exp(y) Σ dy
///  logsumexp:   a = x, lse, dlse: dx = dlse · exp(x − lse), which weighs 0 where x = lse = −inf
///               and 1 where x = lse = +inf, as the forward's weights do.
/// dx may be b's View (softmax, log_softmax) or a's (logsumexp): each element is read before it is
/// written, by the same thread. 16-bit storage is widened as it is read (lse and dlse may be float
/// or 16-bit), computed in float and rounded once as dx is written.
template <class ExecSpace, class Traits, RowGrad Op, class ARows, class BRows, class DXRows, class Lse, class DLse>
struct RowBackwardKernel {
  using member_type = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  using S = std::remove_cv_t<typename decltype(ARows::v)::value_type>;  // storage: T, or 16 bits
  using T = arith_t<S>;
  using Lanes = typename Traits::template tile_lanes<T, member_type>;

  ARows a;
  BRows b;
  DXRows dx;
  Lse lse;    // logsumexp only (else NoRowScalars)
  DLse dlse;
  index_t cols;

  KOKKOS_INLINE_FUNCTION void operator()(const member_type& team) const {
    const index_t r = team.league_rank();
    if constexpr (Op == RowGrad::logsumexp) {
      const T m = widen(lse(r, 0)), g = widen(dlse(r, 0));
      Kokkos::parallel_for(Kokkos::TeamVectorRange(team, cols),
                           [&](index_t c) { dx(r, c) = store_as<S>(lse_grad_element(T(widen(a(r, c))), m, g)); });
    } else {
      // A SoftmaxState whose maximum stays -inf is a compensated sum; OnlineSoftmax merges such
      // sums exactly as the forward merges its sums of weights.
      constexpr index_t tile = Traits::tile;
      const Lanes lanes(team);
      const auto term = [&](index_t c) {
        if constexpr (Op == RowGrad::softmax) return T(widen(b(r, c)) * widen(a(r, c)));
        else return widen(b(r, c));
      };
      SoftmaxState<T> sum = SoftmaxState<T>::identity();
      Kokkos::parallel_reduce(
          Kokkos::TeamThreadRange(team, (cols + tile - 1) / tile),
          [&](index_t t, SoftmaxState<T>& acc) {
            const index_t tb = t * tile, te = tb + tile < cols ? tb + tile : cols;
            acc.add_term(lanes.tile_sum(tb, te, term));
          },
          OnlineSoftmax<T, Kokkos::AnonymousSpace>(sum));
      const T s = compensated_value(sum);
      Kokkos::parallel_for(Kokkos::TeamVectorRange(team, cols), [&](index_t c) {
        if constexpr (Op == RowGrad::softmax) dx(r, c) = store_as<S>(widen(a(r, c)) * (widen(b(r, c)) - s));
        else dx(r, c) = store_as<S>(widen(b(r, c)) - exp(widen(a(r, c))) * s);
      });
    }
  }
};

/// Runs RowBackwardKernel over every row of a (rows and cols as Rows gives them).
template <RowGrad Op, class ExecSpace, class ARows, class BRows, class DXRows, class Lse, class DLse>
void run_row_backward(const ExecSpace& exec, const ARows& a, const BRows& b, const DXRows& dx, const Lse& lse,
                      const DLse& dlse, const char* label) {
  const index_t rows = a.rows(), cols = a.cols();
  if (rows == 0 || cols == 0) return;
  using Traits = ScheduleTraits<ExecSpace>;
  using Kernel = RowBackwardKernel<ExecSpace, Traits, Op, ARows, BRows, DXRows, Lse, DLse>;
  Kokkos::parallel_for(label,
                       Kokkos::TeamPolicy<ExecSpace>(exec, int(rows), Traits::row_team_size, Traits::vector_length),
                       Kernel{a, b, dx, lse, dlse, cols});
}

}  // namespace kflash::impl
