// Softmax over rows whose columns arrive over time: a state per row absorbs each tile as it comes,
// and one pass at the end turns the columns into softmax or log_softmax.
#pragma once

#include <kflash/impl/errors.hpp>
#include <kflash/impl/schedule/streams.hpp>
#include <kflash/impl/spec/softmax_spec.hpp>
#include <kflash/impl/stream_ranges.hpp>
#include <kflash/impl/workspace.hpp>
#include <kflash/softmax_state.hpp>

#include <cstdint>
#include <string>
#include <type_traits>

namespace kflash {

/// Softmax of `rows` rows of `cols` columns that arrive in tiles, in any order and of any widths
/// (a producer that makes scores block by block, a softmax over a dimension too long to hold twice).
///
///   SoftmaxStream<float> s(exec, y);     // y (rows, cols): the stream writes its columns there
///   s.update(exec, tile, col0);           // tile (rows, w): columns [col0, col0 + w) of every row
///   s.logsumexp(exec, lse);               // at any time: over the columns absorbed so far
///   s.finalize(exec, y, Normalize::prob); // once every column has arrived: softmax (log_prob:
///                                         // log_softmax) of the whole rows, here in place
///
/// update() merges each row's tile state into the row's (m, l) and copies the tile into its columns
/// of y, which are not touched again until finalize(): the rescale that a growing maximum asks for is
/// left to that one pass, which reads y and writes exp(y - m) / l or (y - m) - log l. Memory: one
/// state per row besides y. Columns given twice, tiles that do not fit and finalize() before every
/// column has arrived throw std::invalid_argument. Results equal softmax() and log_softmax() of the
/// whole rows within the contract's bounds, and follow its special values (a row of only -inf gives
/// 0 and -inf, a NaN or +inf makes the row NaN). Calls run on `exec` and may return before they
/// complete, like Kokkos kernels; update() completes its copy before it returns only through
/// exec.fence(). T may be 16-bit storage (kflash::bhalf_t, kflash::half_t): the tiles and y hold
/// 16-bit values, the states and the final pass are computed in float, each output rounded once.
template <class T, class ExecSpace = Kokkos::DefaultExecutionSpace>
class SoftmaxStream {
  static_assert(std::is_floating_point<T>::value || impl::is_half_type<T>,
                "kflash::SoftmaxStream: T must be float, double, kflash::bhalf_t or kflash::half_t");

 public:
  using execution_space = ExecSpace;
  using memory_space = typename ExecSpace::memory_space;
  /// The stream's rows, as the View given to the constructor.
  using values_type = Kokkos::View<T**, Kokkos::LayoutStride, memory_space>;
  /// The arithmetic type: T, or float for 16-bit T.
  using arith_type = impl::arith_t<T>;
  /// Each row's state over the columns absorbed so far.
  using states_type = Kokkos::View<SoftmaxState<arith_type>*, memory_space>;

  /// A stream writing into y (rows, cols), a rank-2 View of T in the space's memory, of any layout.
  template <class YView>
  SoftmaxStream(const ExecSpace& exec, const YView& y) : y_(checked_output(y)) {
    const impl::CallScope<ExecSpace> call("SoftmaxStream");
    states_ = states_type(Kokkos::view_alloc(exec, Kokkos::WithoutInitializing, "kflash::SoftmaxStream states"),
                          y_.extent(0));
    Kokkos::deep_copy(exec, states_, SoftmaxState<arith_type>::identity());
  }
  template <class YView>
  explicit SoftmaxStream(const YView& y) : SoftmaxStream(impl::initialized_space<ExecSpace>("SoftmaxStream"), y) {}

  SoftmaxStream(const SoftmaxStream&) = delete;
  SoftmaxStream& operator=(const SoftmaxStream&) = delete;
  SoftmaxStream(SoftmaxStream&&) = default;
  SoftmaxStream& operator=(SoftmaxStream&&) = default;

  std::int64_t rows() const { return std::int64_t(y_.extent(0)); }
  std::int64_t cols() const { return std::int64_t(y_.extent(1)); }
  /// The number of columns absorbed so far.
  std::int64_t columns_absorbed() const { return columns_.covered(); }
  const values_type& values() const { return y_; }
  const states_type& states() const { return states_; }

  /// Absorbs tile (rows, w), any layout, as columns [col0, col0 + w) of every row.
  template <class TileView>
  void update(const ExecSpace& exec, const TileView& tile, std::int64_t col0) {
    using namespace impl;
    const char* fn = "SoftmaxStream::update";
    const CallScope<ExecSpace> call(fn);
    static_check_view<ExecSpace, TileView, false, true>();
    static_assert(std::is_same<std::remove_cv_t<typename TileView::value_type>, T>::value,
                  "kflash::SoftmaxStream::update: the tile's value type must be the stream's T");
    require_rank(fn, "tile", tile, 2, 2);
    if constexpr (view_rank<TileView> == 2) {
      require_open(fn);
      const std::int64_t w = std::int64_t(tile.extent(1));
      if (std::int64_t(tile.extent(0)) != rows() || col0 < 0 || col0 + w > cols())
        throw_invalid_argument(fn, "argument '" + describe("tile", tile) + "' at col0 = " + std::to_string(col0) +
                                       " does not fit the stream's " + describe("y", y_) +
                                       ": expected (rows, w) with 0 <= col0 and col0 + w <= cols");
      columns_.add(col0, col0 + w, fn, "columns");
      if (w == 0 || rows() == 0) return;
      absorb_row_states(exec, Rows<TileView>{tile}, states_, "kflash::SoftmaxStream::update");
      Kokkos::deep_copy(exec, Kokkos::subview(y_, Kokkos::ALL, Kokkos::make_pair(col0, col0 + w)), tile);
    }
  }

  /// out (rows) = log(sum exp) of each row over the columns absorbed so far (-inf before any); out
  /// holds T, or float where T is 16-bit.
  template <class OutView>
  void logsumexp(const ExecSpace& exec, const OutView& out) const {
    using namespace impl;
    const char* fn = "SoftmaxStream::logsumexp";
    const CallScope<ExecSpace> call(fn);
    static_check_view<ExecSpace, OutView, true, true>();
    static_assert(std::is_same<typename OutView::value_type, T>::value ||
                      std::is_same<typename OutView::value_type, arith_type>::value,
                  "kflash::SoftmaxStream::logsumexp: out's value type must be the stream's T (or float where T "
                  "is 16-bit)");
    require_rank(fn, "out", out, 1, 1);
    if constexpr (view_rank<OutView> == 1) {
      require_open(fn);
      if (std::int64_t(out.extent(0)) != rows())
        throw_invalid_argument(fn, "argument '" + describe("out", out) + "' must have one element per row of the "
                                                                       "stream's " + describe("y", y_));
      RowPlan plan;
      plan.rows = rows(), plan.cols = plan.chunk_len = cols();
      write<RowOp::logsumexp>(exec, LseOut<OutView>{out}, plan, "kflash::SoftmaxStream::logsumexp");
    }
  }

  /// out = softmax (what = Normalize::prob) or log_softmax (Normalize::log_prob) of the whole rows,
  /// from the columns in y: out may be y itself (the stream is then spent: later calls throw) or
  /// another View of y's shape, of any layout (the stream goes on).
  template <class OutView>
  void finalize(const ExecSpace& exec, const OutView& out, Normalize what) {
    using namespace impl;
    const char* fn = "SoftmaxStream::finalize";
    const CallScope<ExecSpace> call(fn);
    static_check_view<ExecSpace, OutView, true, true>();
    static_assert(std::is_same<typename OutView::value_type, T>::value,
                  "kflash::SoftmaxStream::finalize: out's value type must be the stream's T");
    require_rank(fn, "out", out, 2, 2);
    if constexpr (view_rank<OutView> == 2) {
      require_open(fn);
      require_same_shape(fn, "y", y_, "out", out);
      if (columns_.covered() != cols()) {
        const std::int64_t gap = columns_.first_gap(cols());
        throw_invalid_argument(fn, "column " + std::to_string(gap) + " of the stream's " + describe("y", y_) +
                                       " has not arrived (" + std::to_string(columns_.covered()) + " of " +
                                       std::to_string(cols()) + " columns absorbed)");
      }
      const RowPlan plan = plan_rows<arith_type, ScheduleTraits<ExecSpace>>(exec, rows(), cols());
      const char* label = "kflash::SoftmaxStream::finalize";
      if (what == Normalize::prob) write<RowOp::softmax>(exec, Rows<OutView>{out}, plan, label);
      else write<RowOp::log_softmax>(exec, Rows<OutView>{out}, plan, label);
      if (out.data() == y_.data()) spent_ = true;
    }
  }

  /// The same on the default instance of the execution space.
  template <class TileView>
  void update(const TileView& tile, std::int64_t col0) {
    update(impl::initialized_space<ExecSpace>("SoftmaxStream::update"), tile, col0);
  }
  template <class OutView>
  void logsumexp(const OutView& out) const {
    logsumexp(impl::initialized_space<ExecSpace>("SoftmaxStream::logsumexp"), out);
  }
  template <class OutView>
  void finalize(const OutView& out, Normalize what) {
    finalize(impl::initialized_space<ExecSpace>("SoftmaxStream::finalize"), out, what);
  }

 private:
  template <class YView>
  static values_type checked_output(const YView& y) {
    using namespace impl;
    static_check_view<ExecSpace, YView, true, true>();
    static_assert(std::is_same<typename YView::value_type, T>::value,
                  "kflash::SoftmaxStream: y's value type must be the stream's T");
    require_initialized("SoftmaxStream");
    require_rank("SoftmaxStream", "y", y, 2, 2);
    if constexpr (view_rank<YView> == 2) {
      return values_type(y);
    } else {
      return values_type();
    }
  }

  void require_open(const char* fn) const {
    if (spent_)
      impl::throw_invalid_argument(fn, "the stream was finalized in place: its columns hold the result");
  }

  /// Op's write phase over y, from each row's state, on plan.
  template <impl::RowOp Op, class OutRows>
  void write(const ExecSpace& exec, const OutRows& out, const impl::RowPlan& plan, const char* label) const {
    impl::write_from_states<Op>(exec, impl::Rows<values_type>{y_}, out, states_, plan, label);
  }

  values_type y_;
  states_type states_;
  impl::StreamRanges columns_;
  bool spent_ = false;
};

}  // namespace kflash
