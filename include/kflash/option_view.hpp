// A Kokkos View held by an options struct whatever its value type, layout and memory space, so that
// the struct stays plain (not a template) and a kernel reads the View through its strides.
#pragma once

#include <kflash/impl/compat.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>

namespace kflash {

/// A View of rank 1 to 4 given as an option (attention's ALiBi slopes, sinks, bias, mask). It keeps
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
    for (int i = 0; i < rank; ++i) {
      extent_[i] = v.extent(i);
      stride_[i] = std::int64_t(v.stride(i));
    }
    value_ = std::is_same<value, float>::value    ? Value::float32
             : std::is_same<value, double>::value ? Value::float64
             : std::is_same<value, bool>::value   ? Value::boolean
                                                  : Value::other;
    host_accessible_ = Kokkos::SpaceAccessibility<Kokkos::DefaultHostExecutionSpace, memory>::accessible;
    device_accessible_ = Kokkos::SpaceAccessibility<Kokkos::DefaultExecutionSpace, memory>::accessible;
  }

  bool empty() const { return keep_ == nullptr; }
  int rank() const { return rank_; }
  std::size_t extent(int i) const { return i < rank_ ? extent_[i] : 1; }
  std::int64_t stride(int i) const { return i < rank_ ? stride_[i] : 0; }
  const void* data() const { return data_; }

  /// Whether the values are of type T (float, double or bool).
  template <class T>
  bool holds() const {
    return (std::is_same<T, float>::value && value_ == Value::float32) ||
           (std::is_same<T, double>::value && value_ == Value::float64) ||
           (std::is_same<T, bool>::value && value_ == Value::boolean);
  }
  /// The name of the value type, for messages.
  const char* value_name() const {
    switch (value_) {
      case Value::float32: return "float";
      case Value::float64: return "double";
      case Value::boolean: return "bool";
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
  enum class Value { float32, float64, boolean, other };
  std::shared_ptr<const void> keep_;
  const void* data_ = nullptr;
  int rank_ = 0;
  std::size_t extent_[4] = {1, 1, 1, 1};
  std::int64_t stride_[4] = {0, 0, 0, 0};
  Value value_ = Value::other;
  bool host_accessible_ = false;
  bool device_accessible_ = false;
};

}  // namespace kflash
