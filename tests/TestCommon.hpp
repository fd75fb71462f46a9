// Helpers shared by the test bodies: the long-double host reference, data and View makers.
#pragma once

#include <kflash/kflash.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

namespace kflash_test {

using ld = long double;
using Scalars = ::testing::Types<float, double>;

template <class T>
constexpr T inf = std::numeric_limits<T>::infinity();
template <class T>
constexpr T nan = std::numeric_limits<T>::quiet_NaN();
template <class T>
constexpr ld eps = std::numeric_limits<T>::epsilon();

/// Normal(0, sigma) values, reproducible from the seed.
template <class T>
std::vector<T> normal_values(std::size_t n, unsigned seed, double sigma = 1.0) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> dist(0.0, sigma);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(dist(gen));
  return v;
}

/// exp for the references of outputs of type T: in double for fp32 and narrower outputs (its
/// relative error, 2^-52, is far below their tolerances, and the long double exp costs several
/// times more), in long double for fp64 outputs.
template <class T>
ld reference_exp(ld x) {
  if constexpr (sizeof(T) < sizeof(double)) {
    return std::exp(double(x));
  } else {
    return std::exp(x);
  }
}

/// Reference (max, l = sum exp(x - max)) of a row in long double (exp by reference_exp), with the
/// contract's rules.
struct RefRow {
  ld max = -std::numeric_limits<ld>::infinity();
  ld l = 0;
  bool nan = false;
  ld lse() const {
    if (nan) return std::numeric_limits<ld>::quiet_NaN();
    if (std::isinf(max)) return max;  // +inf, or -inf for an empty / all -inf row
    return max + std::log(l);
  }
};

template <class T>
RefRow reference_row(const T* x, std::size_t n, std::size_t stride = 1) {
  RefRow r;
  for (std::size_t i = 0; i < n; ++i) {
    const ld v = x[i * stride];
    if (std::isnan(v)) r.nan = true;
    else if (v > r.max) r.max = v;
  }
  if (r.nan || std::isinf(r.max)) return r;
  // Blocked summation: each block sequential, blocks summed sequentially (error ~ (1024 + n/1024) ulp).
  ld total = 0;
  for (std::size_t b = 0; b < n; b += 1024) {
    ld block = 0;
    for (std::size_t i = b; i < n && i < b + 1024; ++i) block += reference_exp<T>(ld(x[i * stride]) - r.max);
    total += block;
  }
  r.l = total;
  return r;
}

/// Checks y against the reference softmax / log_softmax of one row.
/// softmax: |y - p| <= 16 eps (1 + |x - max|) p + smallest normal (exp's argument is rounded at |x - max|).
/// log_softmax: |y - q| <= 16 eps (1 + |x - max| + |log l| + |q|).
template <class T>
void expect_row_matches(const RefRow& r, const T* x, const T* y, std::size_t n, bool log_space,
                        const std::string& where) {
  const bool nan_row = r.nan || r.max == std::numeric_limits<ld>::infinity();
  const ld log_l = std::log(r.l);  // once a row: the long double log costs as much as the exp
  for (std::size_t i = 0; i < n; ++i) {
    const ld xi = x[i], yi = y[i];
    if (nan_row) {
      ASSERT_TRUE(std::isnan(yi)) << where << " element " << i << ": expected NaN, got " << yi;
      continue;
    }
    if (r.max == -std::numeric_limits<ld>::infinity()) {  // fully masked row
      if (log_space) ASSERT_EQ(yi, -inf<ld>) << where << " element " << i;
      else ASSERT_EQ(yi, 0) << where << " element " << i;
      continue;
    }
    if (xi == -inf<ld>) {  // masked entry: exactly 0 / -inf
      if (log_space) ASSERT_EQ(yi, -inf<ld>) << where << " element " << i;
      else ASSERT_EQ(yi, 0) << where << " element " << i;
      continue;
    }
    const ld d = xi - r.max;
    if (log_space) {
      const ld q = d - log_l;
      if (std::isinf(T(q))) {  // the true value is below -max by more than half an ulp: rounds to -inf
        ASSERT_EQ(yi, -inf<ld>) << where << " element " << i;
        continue;
      }
      const ld tol = 16 * eps<T> * (1 + std::fabs(d) + std::fabs(log_l) + std::fabs(q));
      ASSERT_LE(std::fabs(yi - q), tol) << where << " element " << i << " x=" << xi << " y=" << yi
                                        << " ref=" << q;
    } else {
      const ld p = reference_exp<T>(d) / r.l;
      const ld tol = 16 * eps<T> * (1 + std::fabs(d)) * p + std::numeric_limits<T>::min();
      ASSERT_LE(std::fabs(yi - p), tol) << where << " element " << i << " x=" << xi << " y=" << yi
                                        << " ref=" << p;
    }
  }
}

/// logsumexp tolerance: rel_l relative error in l, plus the rounding of the result itself.
template <class T>
void expect_lse_matches(const RefRow& r, T got, ld rel_l, const std::string& where) {
  const ld ref = r.lse();
  if (std::isnan(ref)) {
    ASSERT_TRUE(std::isnan(got)) << where << ": expected NaN, got " << got;
  } else if (std::isinf(ref)) {
    ASSERT_EQ(ld(got), ref) << where;
  } else {
    const ld tol = rel_l + 2 * eps<T> * std::fabs(ref);
    ASSERT_LE(std::fabs(ld(got) - ref), tol) << where << ": got " << got << " ref " << ref;
  }
}

/// A rows x cols matrix of layout L in the execution space's memory, filled from row-major host
/// data. LayoutStride matrices are every other column of a wider allocation.
template <class T, class L, class ExecSpace>
Kokkos::View<T**, L, typename ExecSpace::memory_space> make_matrix(std::size_t rows, std::size_t cols,
                                                                   const std::vector<T>& host_row_major) {
  using mem = typename ExecSpace::memory_space;
  Kokkos::View<T**, L, mem> v;
  if constexpr (std::is_same<L, Kokkos::LayoutStride>::value) {
    Kokkos::View<T***, Kokkos::LayoutRight, mem> wide("m", rows, cols, 2);
    v = Kokkos::subview(wide, Kokkos::ALL, Kokkos::ALL, 1);
  } else {
    v = Kokkos::View<T**, L, mem>("m", rows, cols);
  }
  // Through a contiguous View of the same space: Kokkos copies between memory spaces only
  // contiguous spans, and within a space between any layouts.
  Kokkos::View<T**, Kokkos::LayoutRight, mem> packed("packed", rows, cols);
  auto h = Kokkos::create_mirror_view(packed);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) h(r, c) = host_row_major[r * cols + c];
  Kokkos::deep_copy(packed, h);
  Kokkos::deep_copy(v, packed);
  return v;
}

template <class V>
std::vector<typename V::non_const_value_type> to_host_row_major(const V& v) {
  Kokkos::View<typename V::non_const_value_type**, Kokkos::LayoutRight, typename V::memory_space> packed(
      "packed", v.extent(0), v.extent(1));
  Kokkos::deep_copy(packed, v);
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), packed);
  std::vector<typename V::non_const_value_type> out(v.extent(0) * v.extent(1));
  for (std::size_t r = 0; r < v.extent(0); ++r)
    for (std::size_t c = 0; c < v.extent(1); ++c) out[r * v.extent(1) + c] = h(r, c);
  return out;
}

template <class T, class ExecSpace>
Kokkos::View<T*, typename ExecSpace::memory_space> make_vector(const std::vector<T>& host) {
  Kokkos::View<T*, typename ExecSpace::memory_space> v("v", host.size());
  auto h = Kokkos::create_mirror_view(v);
  for (std::size_t i = 0; i < host.size(); ++i) h(i) = host[i];
  Kokkos::deep_copy(v, h);
  return v;
}

template <class V>
std::vector<typename V::non_const_value_type> to_host(const V& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return std::vector<typename V::non_const_value_type>(h.data(), h.data() + h.extent(0));
}

/// Expects f() to throw std::invalid_argument whose message contains every one of `parts`.
template <class F>
void expect_invalid(F&& f, std::initializer_list<const char*> parts) {
  try {
    f();
    ADD_FAILURE() << "no exception thrown";
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    for (const char* p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

/// rows x cols values (rows >= 25) for the host kernels' rows in lanes (16 rows at a time): normal
/// values, a dominant one, finite values as large as `big` of either sign, a masked value and, where
/// `special`, rows with a NaN, all -inf, and +inf (in the second group of 16 rows).
template <class T>
std::vector<T> lane_rows_values(std::size_t rows, std::size_t cols, bool special, unsigned seed, T big = T(1e30)) {
  auto v = normal_values<T>(rows * cols, seed, 3.0);
  v[3 * cols + cols / 2] += T(15);
  v[5 * cols] = big;
  v[6 * cols + cols - 1] = -big;
  if (cols > 1) v[7 * cols + 1] = -inf<T>;
  if (special) {
    v[18 * cols + cols / 2] = nan<T>;
    for (std::size_t c = 0; c < cols; ++c) v[21 * cols + c] = -inf<T>;
    v[24 * cols + cols - 1] = inf<T>;
  }
  return v;
}

/// Pages with an unreadable page on either side: an access outside [begin(), end()) faults.
struct GuardedPages {
  std::size_t page = std::size_t(sysconf(_SC_PAGESIZE)), bytes;
  char* base = static_cast<char*>(MAP_FAILED);
  explicit GuardedPages(std::size_t n) : bytes((n + page - 1) / page * page + 2 * page) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return;
    base = static_cast<char*>(p);
    if (mprotect(base, page, PROT_NONE) != 0 || mprotect(base + bytes - page, page, PROT_NONE) != 0) {
      munmap(base, bytes);
      base = static_cast<char*>(MAP_FAILED);
    }
  }
  ~GuardedPages() {
    if (base != static_cast<char*>(MAP_FAILED)) munmap(base, bytes);
  }
  char* begin() const { return base + page; }
  char* end() const { return base + bytes - page; }
};

/// y = log_softmax(x) where log_space, else softmax(x), on Exec; fenced.
template <class Exec, class X, class Y>
void softmax_or_log_softmax(bool log_space, const X& x, const Y& y) {
  if (log_space) kflash::log_softmax(Exec(), x, y);
  else kflash::softmax(Exec(), x, y);
  Exec().fence();
}

/// f(x, y, cols, where) for host Views x and y of `rows` contiguous rows of T, of every length from 1
/// to max_cols: placed so that their last element is the last before an unreadable page, then so
/// that their first is the first after one (GuardedPages). x's contents are f's to write.
template <class T, class F>
void for_rows_beside_guards(std::size_t rows, std::size_t max_cols, const F& f) {
  using Rows = Kokkos::View<T**, Kokkos::LayoutRight, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  GuardedPages xp(rows * max_cols * sizeof(T)), yp(rows * max_cols * sizeof(T));
  ASSERT_NE(xp.base, static_cast<char*>(MAP_FAILED)) << "mmap and mprotect of " << xp.bytes << " bytes failed";
  ASSERT_NE(yp.base, static_cast<char*>(MAP_FAILED)) << "mmap and mprotect of " << yp.bytes << " bytes failed";
  for (std::size_t cols = 1; cols <= max_cols; ++cols) {
    const std::size_t bytes = rows * cols * sizeof(T);
    for (bool at_end : {true, false}) {
      T* xd = reinterpret_cast<T*>(at_end ? xp.end() - bytes : xp.begin());
      T* yd = reinterpret_cast<T*>(at_end ? yp.end() - bytes : yp.begin());
      f(Rows(xd, rows, cols), Rows(yd, rows, cols), cols,
        std::to_string(rows) + "x" + std::to_string(cols) + (at_end ? " ending at" : " starting after") + " a guard");
      if (::testing::Test::HasFailure()) return;
    }
  }
}

}  // namespace kflash_test
