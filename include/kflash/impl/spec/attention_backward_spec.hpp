// Picks attention_backward's schedule for an execution space: on spaces whose
// traits have host kernels, the tiles of host/host_attention_backward.hpp for
// dq, dk and dv; elsewhere the team schedule of
// schedule/team_attention_backward.hpp on the traits' backward shape for the
// wider of D and Dv, or the portable schedule of schedule/attention_backward.hpp
// where no shape is that wide. The options' gradients by the portable kernels on
// every space.
#pragma once

#include <kflash/impl/host/host_attention_backward.hpp>
#include <kflash/impl/schedule/attention_backward.hpp>
#include <kflash/impl/schedule/team_attention_backward.hpp>

namespace kflash::impl {

/// Runs the backward of a checked call whose shapes are in p (the forward's
/// plan before scheduling) on Views as the kernels read them (dense, or
/// varlen's packed rows). Returns when it is done.
template <class ExecSpace, class Terms, class Seq, class QV, class KV, class VV, class OV, class LV, class DOV,
          class DQV, class DKV, class DVV, class Grads>
void dispatch_attention_backward(const ExecSpace &exec, const AttentionPlan &p, const Terms &terms, const Seq &seq,
                                 const QV &q, const KV &k, const VV &v, const OV &o, const LV &lse, const DOV &dout,
                                 const DQV &dq, const DKV &dk, const DVV &dv, const Grads &grads) {
  using Traits = ScheduleTraits<ExecSpace>;
  const auto pairs = backward_pairs(exec, p, terms, seq, q, k, v, o, lse, dout);
  if constexpr (Traits::host_kernels) {
    host::run_host_attention_backward(exec, pairs, dq, dk, dv);
  } else {
    using T = typename std::remove_const_t<decltype(pairs)>::T;
    constexpr int small = Traits::team_dv_small, large = Traits::team_dv_large;
    const index_t width = p.D > p.Dv ? p.D : p.Dv;
    if (width <= small) {
      run_team_backward<typename Traits::template backward_shape<T, small>>(exec, pairs, dq, dk, dv);
    } else if (width <= large) {
      run_team_backward<typename Traits::template backward_shape<T, large>>(exec, pairs, dq, dk, dv);
    } else {
      run_backward_by_rows(exec, pairs, dq, dk, dv);
    }
  }
  run_option_grads(exec, pairs, grads);
  exec.fence();  // D must outlive the kernels
}

}  // namespace kflash::impl
