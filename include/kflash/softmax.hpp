// softmax, log_softmax and logsumexp over rank-1 and rank-2 Views.
#pragma once

#include <kflash/impl/errors.hpp>
#include <kflash/impl/host_kernels.hpp>
#include <kflash/impl/rows.hpp>
#include <kflash/impl/team_rows.hpp>
#include <kflash/impl/workspace.hpp>
#include <kflash/softmax_state.hpp>

#include <string>
#include <type_traits>

namespace kflash {
namespace impl {

inline const char* row_op_name(RowOp op) {
  switch (op) {
    case RowOp::softmax: return "softmax";
    case RowOp::log_softmax: return "log_softmax";
    default: return "logsumexp";
  }
}

/// Whether a call's output is large enough for non-temporal stores (host::stream_bytes).
template <class T>
bool host_stream(const RowPlan& p) {
  return p.rows * p.cols * index_t(sizeof(T)) >= host::stream_bytes;
}

/// The bytes of team scratch (level 1) in which each host team keeps softmax's weights of whole
/// rows, where the host kernels take them (host::buffered_weights_bytes); 0 elsewhere.
template <class T>
std::size_t host_weights_bytes(RowOp op, const RowPlan& p) {
  const index_t bytes = p.cols * index_t(sizeof(T));
  const bool in_place = !host_stream<T>(p) && bytes <= host::stored_weights_bytes;
  if (op != RowOp::softmax || p.chunks != 1 || p.cols <= host::row_tile || in_place ||
      bytes > host::buffered_weights_bytes)
    return 0;
  return std::size_t(host::weights_elements(p.cols)) * sizeof(T);
}

template <class ExecSpace, class XRows, class YRows, class Workspace, RowOp Op>
struct RowKernel {
  using member_type = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  using T = std::remove_cv_t<typename Workspace::value_type::value_type>;
  using state_type = SoftmaxState<T>;
  using reducer_type = OnlineSoftmax<T, Kokkos::AnonymousSpace>;

  XRows x;
  YRows y;  // for logsumexp: the output rows (rank 0 or 1 View seen as y(r, 0))
  Workspace ws;
  RowPlan plan;
  RowPhase phase;
  index_t items_per_row;  // work items (teams) per row in this phase: 1 or plan.chunks
  bool contiguous;        // host space and rows of unit stride: the compiled host loops

  KOKKOS_INLINE_FUNCTION void operator()(const member_type& team) const {
    const index_t item = team.league_rank();
    const index_t r = item / items_per_row;
    const index_t c = item % items_per_row;
    const index_t begin = c * plan.chunk_len;
    const index_t end = begin + plan.chunk_len < plan.cols ? begin + plan.chunk_len : plan.cols;
#if KFLASH_IMPL_ON_HOST
    if constexpr (RowTraits<ExecSpace>::is_host) {
      if (contiguous) {
        host_item(item, r, c, begin, end, weights(team));
        return;
      }
    }
#endif

    state_type s = state_type::identity();
    if (phase == RowPhase::finish) {
      // The same merge as every other tier, over the row's chunk states.
      Kokkos::parallel_reduce(
          Kokkos::TeamVectorRange(team, plan.chunks),
          [&](index_t j, state_type& acc) { acc.merge(ws(r, j)); }, reducer_type(s));
    } else {
      // Tiles over the team's threads, each tile over the thread's vector lanes.
      const index_t tile = RowTraits<ExecSpace>::tile;
      Kokkos::parallel_reduce(
          Kokkos::TeamThreadRange(team, (end - begin + tile - 1) / tile),
          [&](index_t t, state_type& acc) {
            const index_t tb = begin + t * tile;
            const index_t te = tb + tile < end ? tb + tile : end;
            auto value = [&](index_t i) { return x(r, i); };
            if constexpr (RowTraits<ExecSpace>::is_host) {  // one thread: vectorisable loops
              acc.merge(serial_tile_state<T>(tb, te, value, [](index_t, T) {}));
            } else {
              acc.merge(vector_tile_state<T>(team, tb, te, value));
            }
          },
          reducer_type(s));
    }

    if (phase == RowPhase::partial) {
      Kokkos::single(Kokkos::PerTeam(team), [&]() { ws(r, c) = s; });
    } else if constexpr (Op == RowOp::logsumexp) {
      Kokkos::single(Kokkos::PerTeam(team), [&]() { y(r, 0) = s.logsumexp(); });
    } else {
      const SoftmaxNormalizer<T> n(s, Op == RowOp::softmax ? Normalize::prob : Normalize::log_prob);
      Kokkos::parallel_for(Kokkos::TeamVectorRange(team, begin, end), [&](index_t i) {
        if constexpr (Op == RowOp::softmax) {
          y(r, i) = n.prob(x(r, i));
        } else {
          y(r, i) = n.log_prob(x(r, i));
        }
      });
    }
  }

  bool stream() const { return host_stream<T>(plan); }

  /// This team's weights, or null.
  T* weights(const member_type& team) const {
    const std::size_t bytes = host_weights_bytes<T>(Op, plan);
    if (bytes == 0) return nullptr;
    return static_cast<T*>(team.team_scratch(1).get_shmem(bytes));
  }

  /// The same item on a host space, through the compiled loops of host_kernels.hpp (a team is one
  /// thread there). In the whole phase an item is plan.rows_per_item rows.
  void host_item(index_t item, index_t r, index_t c, index_t begin, index_t end, T* weights) const {
    using host::RowStep;
    using host::row_step;
    if (phase == RowPhase::whole) {
      const index_t r0 = item * plan.rows_per_item;
      const index_t r1 = r0 + plan.rows_per_item < plan.rows ? r0 + plan.rows_per_item : plan.rows;
      if (r0 >= r1) return;
      host::RowBlock<T> block{Op,         x.row(r0), x.row_stride(), nullptr, 0, nullptr, 0, r1 - r0, plan.cols,
                              stream(), weights};
      if constexpr (Op == RowOp::logsumexp) {
        block.out = y.row(r0);
        block.ldout = y.row_stride();
      } else {
        block.y = y.row(r0);
        block.ldy = y.row_stride();
      }
      host::run(block);
      return;
    }
    const T* xr = x.row(r) + begin;
    const index_t n = end - begin;
    state_type s = state_type::identity();
    if (phase == RowPhase::finish) {
      for (index_t j = 0; j < plan.chunks; ++j) s.merge(ws(r, j));
    } else {
      s = row_step<T>(RowStep::state, xr, nullptr, n);
    }
    if (phase == RowPhase::partial) {
      ws(r, c) = s;
    } else if constexpr (Op == RowOp::logsumexp) {
      y(r, 0) = s.logsumexp();
    } else {
      const SoftmaxNormalizer<T> norm(s, Op == RowOp::softmax ? Normalize::prob : Normalize::log_prob);
      T* yr = y.row(r) + begin;
      if constexpr (Op == RowOp::softmax) {
        row_step<T>(RowStep::prob, xr, yr, n, norm.shift, norm.inv_sum, stream());
      } else {
        row_step<T>(RowStep::log_prob, xr, yr, n, norm.shift, norm.log_sum, stream());
      }
    }
  }
};

/// logsumexp output seen as rows: out(r) for rank 1, out() for rank 0.
template <class View, int Rank = view_rank<View>>
struct LseOut {
  View v;
  KOKKOS_INLINE_FUNCTION decltype(auto) operator()(index_t r, index_t) const { return v(r); }
  KOKKOS_INLINE_FUNCTION auto row(index_t r) const { return v.data() + r * index_t(v.stride(0)); }
  index_t row_stride() const { return index_t(v.stride(0)); }
};
template <class View>
struct LseOut<View, 0> {
  View v;
  KOKKOS_INLINE_FUNCTION decltype(auto) operator()(index_t, index_t) const { return v(); }
  KOKKOS_INLINE_FUNCTION auto row(index_t) const { return v.data(); }
  index_t row_stride() const { return 0; }
};

template <RowOp Op, class ExecSpace, class XRows, class YRows>
void run_rows(const ExecSpace& exec, const XRows& x, const YRows& y) {
  using T = std::remove_cv_t<typename decltype(x.v)::value_type>;
  using memory_space = typename decltype(x.v)::memory_space;
  using Workspace = Kokkos::View<SoftmaxState<T>**, memory_space, Kokkos::MemoryUnmanaged>;
  using Kernel = RowKernel<ExecSpace, XRows, YRows, Workspace, Op>;

  using traits = RowTraits<ExecSpace>;
  const RowPlan plan = plan_rows<T>(exec, x.rows(), x.cols());
  if (plan.rows == 0) return;
  bool contiguous = traits::is_host && x.unit_stride();
  if constexpr (Op != RowOp::logsumexp) contiguous = contiguous && y.unit_stride();
  const std::string label = std::string("kflash::") + row_op_name(Op);
  if constexpr (!traits::is_host) {
    if (run_team_rows<Op, traits, traits::template team_regs<T>>(exec, x, y, plan, label)) return;
  }
  if (plan.chunks == 1) {
    const index_t items = contiguous ? (plan.rows + plan.rows_per_item - 1) / plan.rows_per_item : plan.rows;
    auto policy = row_team_policy(exec, items);
    const std::size_t weights = contiguous ? host_weights_bytes<T>(Op, plan) : 0;
    if (weights > 0) policy.set_scratch_size(1, Kokkos::PerTeam(weights));
    Kokkos::parallel_for(label, policy, Kernel{x, y, Workspace(), plan, RowPhase::whole, 1, contiguous});
    return;
  }
  // Several teams per row: chunk states into a workspace, then merge them and write. logsumexp
  // writes one value per row, so its finish phase has one item per row.
  const CachedWorkspace<memory_space> scratch(
      exec, sizeof(SoftmaxState<T>) * std::size_t(plan.rows * plan.chunks), label + " workspace");
  const Workspace ws(scratch.template at<SoftmaxState<T>>(0), plan.rows, plan.chunks);
  Kokkos::parallel_for(label + " partial", row_team_policy(exec, plan.rows * plan.chunks),
                       Kernel{x, y, ws, plan, RowPhase::partial, plan.chunks, contiguous});
  const index_t finish_per_row = Op == RowOp::logsumexp ? 1 : plan.chunks;
  Kokkos::parallel_for(label + " finish", row_team_policy(exec, plan.rows * finish_per_row),
                       Kernel{x, y, ws, plan, RowPhase::finish, finish_per_row, contiguous});
  exec.fence();  // the workspace must outlive the kernels
}

template <RowOp Op, class ExecSpace, class XView, class YView>
void softmax_rows(const ExecSpace& exec, const XView& x, const YView& y) {
  static_check_view<ExecSpace, XView, false>();
  static_check_view<ExecSpace, YView, true>();
  static_assert(std::is_same<std::remove_cv_t<typename XView::value_type>, typename YView::value_type>::value,
                "kflash: x and y must have the same value type");
  const char* fn = row_op_name(Op);
  require_rank(fn, "x", x, 1, 2);
  require_same_shape(fn, "x", x, "y", y);
  if constexpr (view_rank<XView> == view_rank<YView> && view_rank<XView> >= 1 && view_rank<XView> <= 2) {
    run_rows<Op>(exec, Rows<XView>{x}, Rows<YView>{y});
  }
}

}  // namespace impl

/// y = softmax(x): over all elements of a rank-1 View, or over the last extent of each row of a
/// rank-2 View. Any layout; x and y may be the same View (in place). Runs on `exec`; like any Kokkos
/// kernel it may return before it completes (fence `exec` before reading y on the host).
template <class ExecSpace, class XView, class YView>
void softmax(const ExecSpace& exec, const XView& x, const YView& y) {
  impl::softmax_rows<impl::RowOp::softmax>(exec, x, y);
}

/// y = log_softmax(x) = x - logsumexp(x), with the shapes and rules of softmax().
template <class ExecSpace, class XView, class YView>
void log_softmax(const ExecSpace& exec, const XView& x, const YView& y) {
  impl::softmax_rows<impl::RowOp::log_softmax>(exec, x, y);
}

/// out = log(sum exp(x)): rank-1 x gives a rank-0 out; rank-2 x gives a rank-1 out, one value per row.
template <class ExecSpace, class XView, class OutView>
void logsumexp(const ExecSpace& exec, const XView& x, const OutView& out) {
  using namespace impl;
  static_check_view<ExecSpace, XView, false>();
  static_check_view<ExecSpace, OutView, true>();
  static_assert(std::is_same<std::remove_cv_t<typename XView::value_type>, typename OutView::value_type>::value,
                "kflash: x and out must have the same value type");
  constexpr int xr = view_rank<XView>;
  constexpr int outr = view_rank<OutView>;
  require_rank("logsumexp", "x", x, 1, 2);
  if (outr != xr - 1 || (xr == 2 && out.extent(0) != x.extent(0))) {
    throw_invalid_argument("logsumexp", "argument '" + describe("out", out) + "' does not fit '" +
                                            describe("x", x) +
                                            "': expected a rank-0 View for rank-1 x, or a rank-1 View "
                                            "with one element per row of rank-2 x");
  }
  if constexpr ((xr == 1 || xr == 2) && outr == xr - 1) {
    run_rows<RowOp::logsumexp>(exec, Rows<XView>{x}, LseOut<OutView>{out});
  }
}

/// The same, on the default execution space of x's View.
template <class XView, class YView>
void softmax(const XView& x, const YView& y) {
  softmax(typename XView::execution_space(), x, y);
}
template <class XView, class YView>
void log_softmax(const XView& x, const YView& y) {
  log_softmax(typename XView::execution_space(), x, y);
}
template <class XView, class OutView>
void logsumexp(const XView& x, const OutView& out) {
  logsumexp(typename XView::execution_space(), x, out);
}

}  // namespace kflash
