// Scratch memory that kernels reuse from call to call (split rows' chunk states, split K/V's
// partial outputs): an allocation per call costs a first touch of fresh pages on the host, and an
// allocation and a synchronising free on devices.
#pragma once

#include <kflash/impl/compat.hpp>

#include <cstddef>
#include <mutex>
#include <string>
#include <utility>

namespace kflash::impl {

/// `bytes` of scratch in MemorySpace for the lifetime of this object, which the caller ends only
/// after fencing the kernels that use it. The memory comes from one buffer per memory space, grown
/// to the largest request so far and released at Kokkos::finalize; a call that finds that buffer in
/// use (another host thread inside kflash at the same moment) allocates scratch of its own rather
/// than wait.
template <class MemorySpace>
class CachedWorkspace {
 public:
  using Buffer = Kokkos::View<char*, MemorySpace>;

  /// Parts carved from the scratch start at multiples of this many bytes.
  static constexpr std::size_t alignment = 128;
  static constexpr std::size_t aligned(std::size_t bytes) { return (bytes + alignment - 1) / alignment * alignment; }

  template <class ExecSpace>
  CachedWorkspace(const ExecSpace& exec, std::size_t bytes, const std::string& label) {
    Shared& s = shared();
    std::unique_lock<std::mutex> lock(s.mutex, std::try_to_lock);
    if (!lock.owns_lock()) {
      own_ = Buffer(Kokkos::view_alloc(exec, Kokkos::WithoutInitializing, label), bytes);
      data_ = own_.data();
      return;
    }
    if (!s.release_at_finalize) {
      Kokkos::push_finalize_hook([] { release(); });
      s.release_at_finalize = true;
    }
    if (s.buffer.extent(0) < bytes) {
      s.buffer = Buffer();  // freed before the larger one is allocated
      s.buffer = Buffer(Kokkos::view_alloc(exec, Kokkos::WithoutInitializing, "kflash::workspace"), bytes);
      ++s.allocations;
    }
    data_ = s.buffer.data();
    lock_ = std::move(lock);
  }

  CachedWorkspace(const CachedWorkspace&) = delete;
  CachedWorkspace& operator=(const CachedWorkspace&) = delete;

  /// The part that starts at byte `offset` (a multiple of `alignment`), as T's.
  template <class T>
  T* at(std::size_t offset) const {
    return reinterpret_cast<T*>(data_ + offset);
  }

  /// Whether this workspace is the shared buffer (false: the buffer was busy, this one is its own).
  bool shared_buffer() const { return lock_.owns_lock(); }

  /// How many times the shared buffer of MemorySpace has been allocated (it grows, never shrinks).
  static std::size_t allocations() {
    Shared& s = shared();
    std::lock_guard<std::mutex> lock(s.mutex);
    return s.allocations;
  }

  /// Frees the shared buffer (at Kokkos::finalize; it is allocated again when next needed).
  static void release() {
    Shared& s = shared();
    std::lock_guard<std::mutex> lock(s.mutex);
    s.buffer = Buffer();
    s.release_at_finalize = false;  // registered again if Kokkos is initialised again
  }

 private:
  struct Shared {
    std::mutex mutex;
    Buffer buffer;
    bool release_at_finalize = false;
    std::size_t allocations = 0;
  };
  static Shared& shared() {
    static Shared s;
    return s;
  }

  std::unique_lock<std::mutex> lock_;
  Buffer own_;
  char* data_ = nullptr;
};

}  // namespace kflash::impl
