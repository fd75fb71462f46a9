// A Kokkos View held by an options struct whatever its value type, layout and memory space, so that
// the struct stays plain (not a template) and a kernel reads the View through its strides.
#pragma once

#include <kflash/impl/compat.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <type_traits>
#include <vector>

namespace kflash {

/// A View of rank 1 to 4 given as an option (attention's ALiBi slopes, sinks, bias, mask, varlen
/// offsets, paged block table and lengths). It keeps
/// the View's allocation alive while it exists, and records its data, extents, strides (in
/// elements), value type and where it can be read; the call that takes it checks these against what
/// it needs and throws std::invalid_argument naming the option otherwise. Assign any View:
///   options.bias = my_bias;   // Kokkos::View<float****, ...>
/// A default-constructed OptionView is empty: the option is off.
class OptionView {
 public:
  OptionView() = default;

  template <class View, std::enable_if_t<Kokkos::is_view<View>::value, int> = 0>
  OptionView(const View& v) : keep_(std::make_shared<View>(v)), data_(v.data()) {
    constexpr int rank = impl::view_rank<View>;
    static_assert(rank >= 1 && rank <= 4, "kflash::OptionView: the View must have rank 1 to 4");
    using value = std::remove_cv_t<typename View::value_type>;
    using memory = typename View::memory_space;
    rank_ = rank;
    element_bytes_ = sizeof(value);
    for (int i = 0; i < rank; ++i) {
      extent_[i] = v.extent(i);
      stride_[i] = std::int64_t(v.stride(i));
    }
    value_ = std::is_same<value, float>::value          ? Value::float32
             : std::is_same<value, double>::value       ? Value::float64
             : std::is_same<value, bool>::value         ? Value::boolean
             : std::is_same<value, std::int32_t>::value ? Value::int32
             : std::is_same<value, std::int64_t>::value ? Value::int64
                                                        : Value::other;
    if constexpr (std::is_same<value, std::int32_t>::value || std::is_same<value, std::int64_t>::value) {
      if constexpr (rank <= 2) {
        host_integers_ = [v]() {
          const auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
          std::vector<std::int64_t> out;
          out.reserve(h.size());
          if constexpr (rank == 1) {
            for (std::size_t i = 0; i < h.extent(0); ++i) out.push_back(std::int64_t(h(i)));
          } else {
            for (std::size_t i = 0; i < h.extent(0); ++i)
              for (std::size_t j = 0; j < h.extent(1); ++j) out.push_back(std::int64_t(h(i, j)));
          }
          return out;
        };
      }
    }
    writable_ = !std::is_const<typename View::value_type>::value;
    host_accessible_ = Kokkos::SpaceAccessibility<Kokkos::DefaultHostExecutionSpace, memory>::accessible;
    device_accessible_ = Kokkos::SpaceAccessibility<Kokkos::DefaultExecutionSpace, memory>::accessible;
  }

  bool empty() const { return keep_ == nullptr; }
  int rank() const { return rank_; }
  std::size_t extent(int i) const { return i < rank_ ? extent_[i] : 1; }
  std::int64_t stride(int i) const { return i < rank_ ? stride_[i] : 0; }
  const void* data() const { return data_; }
  /// Whether the View's values may be written (not const): an output such as AttentionGrads'.
  bool writable() const { return writable_; }
  /// The bytes from the first element to the end of the last (0 when there is none).
  std::size_t footprint_bytes() const {
    if (empty() || data_ == nullptr) return 0;
    std::size_t last = 0;
    for (int i = 0; i < rank_; ++i) {
      if (extent_[i] == 0) return 0;
      last += (extent_[i] - 1) * std::size_t(stride_[i]);
    }
    return (last + 1) * element_bytes_;
  }

  /// Whether the values are of type T (float, double, bool, std::int32_t or std::int64_t).
  template <class T>
  bool holds() const {
    return (std::is_same<T, float>::value && value_ == Value::float32) ||
           (std::is_same<T, double>::value && value_ == Value::float64) ||
           (std::is_same<T, bool>::value && value_ == Value::boolean) ||
           (std::is_same<T, std::int32_t>::value && value_ == Value::int32) ||
           (std::is_same<T, std::int64_t>::value && value_ == Value::int64);
  }
  /// Whether the values are 32- or 64-bit integers in a View of rank 1 or 2 (index options).
  bool holds_integers() const { return bool(host_integers_); }
  /// The integers of such a View, copied to the host in row-major order.
  std::vector<std::int64_t> host_integers() const { return host_integers_(); }
  /// The name of the value type, for messages.
  const char* value_name() const {
    switch (value_) {
      case Value::float32: return "float";
      case Value::float64: return "double";
      case Value::boolean: return "bool";
      case Value::int32: return "std::int32_t";
      case Value::int64: return "std::int64_t";
      default: return "another type";
    }
  }

  /// Whether kernels of ExecSpace can read the View (for host spaces and the default device space).
  template <class ExecSpace>
  bool accessible_from() const {
    if constexpr (Kokkos::SpaceAccessibility<ExecSpace, Kokkos::HostSpace>::accessible) {
      return host_accessible_;
    } else if constexpr (std::is_same<ExecSpace, Kokkos::DefaultExecutionSpace>::value) {
      return device_accessible_;
    } else {
      return false;
    }
  }

 private:
  enum class Value { float32, float64, boolean, int32, int64, other };
  std::shared_ptr<const void> keep_;
  const void* data_ = nullptr;
  int rank_ = 0;
  std::size_t element_bytes_ = 0;
  std::size_t extent_[4] = {1, 1, 1, 1};
  std::int64_t stride_[4] = {0, 0, 0, 0};
  Value value_ = Value::other;
  bool writable_ = false;
  bool host_accessible_ = false;
  bool device_accessible_ = false;
  std::function<std::vector<std::int64_t>()> host_integers_;
};

}  // namespace kflash
