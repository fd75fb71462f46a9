// The kernels of the streams (softmax_stream.hpp, attention_stream.hpp): states that absorb new
// columns or keys as they arrive, through the same merge as every other tier.
#pragma once

#include <kflash/attention_state.hpp>
#include <kflash/impl/tile/attention_step.hpp>

namespace kflash::impl {

/// SoftmaxStream: each row's state absorbs the states of the chunks of a new tile, ws(r, c) for
/// c < chunks, in chunk order.
template <class States, class Workspace>
struct AbsorbRowStates {
  States states;
  Workspace ws;
  index_t chunks;
  KOKKOS_INLINE_FUNCTION void operator()(index_t r) const {
    auto s = states(r);
    for (index_t c = 0; c < chunks; ++c) s.merge(ws(r, c));
    states(r) = s;
  }
};

/// AttentionStream's running rows: per query row (b, h, i), flattened as row = (b * Hq + h) * Nq + i,
/// the state (m, l) and the unnormalised O (Dv columns), which is O / l times l.
template <class T, class Mem>
struct AttentionRows {
  Kokkos::View<SoftmaxState<T>*, Mem> state;
  Kokkos::View<T**, Kokkos::LayoutRight, Mem> o;
};

/// Row `row` of `a` absorbs a state `s` over other keys whose O is x(d): O = fa * O + fb * x.
template <class T, class Mem, class X>
KOKKOS_INLINE_FUNCTION void absorb_row(const AttentionRows<T, Mem>& a, index_t row, const SoftmaxState<T>& s,
                                       const X& x) {
  SoftmaxState<T> st = a.state(row);
  const OutputFactors<T> f = OutputFactors<T>::merge(st, s);
  for (index_t d = 0; d < index_t(a.o.extent(1)); ++d) a.o(row, d) = f.merged(a.o(row, d), x(d));
  a.state(row) = st;
}

/// The rows absorb one chunk's attention result: o_part (B, Hq, Nq, Dv), normalised over the
/// chunk's keys, and its lse, which holds (m, l) = (lse, 1).
template <class T, class Mem, class OP, class LP>
struct AbsorbAttentionChunk {
  AttentionRows<T, Mem> rows;
  OP o_part;
  LP lse_part;
  index_t Hq, Nq;
  KOKKOS_INLINE_FUNCTION void operator()(index_t row) const {
    const index_t i = row % Nq, h = (row / Nq) % Hq, b = row / (Nq * Hq);
    absorb_row(rows, row, SoftmaxState<T>::of(lse_part(b, h, i)), [&](index_t d) { return o_part(b, h, i, d); });
  }
};

/// The rows absorb another stream's rows (over disjoint keys).
template <class T, class Mem>
struct AbsorbAttentionRows {
  AttentionRows<T, Mem> rows, other;
  KOKKOS_INLINE_FUNCTION void operator()(index_t row) const {
    absorb_row(rows, row, other.state(row), [&](index_t d) { return other.o(row, d); });
  }
};

/// The output O / l and lse of each row, with the sink of its query head joining the denominator
/// (sinks off when null); the rows are left as they are.
template <class T, class Mem, class OV, class LV>
struct AttentionRowsResult {
  AttentionRows<T, Mem> rows;
  Strided<T> sinks;
  OV o;
  LV lse;
  bool has_lse;
  index_t Hq, Nq;
  KOKKOS_INLINE_FUNCTION void operator()(index_t row) const {
    const index_t i = row % Nq, h = (row / Nq) % Hq, b = row / (Nq * Hq);
    SoftmaxState<T> st = rows.state(row);
    const T factor = finish_row(st, sinks.on(), sinks.on() ? sinks(h) : T(0));
    for (index_t d = 0; d < index_t(rows.o.extent(1)); ++d)
      o(b, h, i, d) = store_as<typename OV::non_const_value_type>(rows.o(row, d) * factor);
    if (has_lse) lse(b, h, i) = st.logsumexp();
  }
};

}  // namespace kflash::impl
