#include <kflash/impl/errors.hpp>

#include <stdexcept>

namespace kflash::impl {

std::string describe_extents(const char* name, int rank, const std::size_t* extents) {
  std::string s = name;
  s += " (";
  for (int i = 0; i < rank; ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(extents[i]);
  }
  s += ")";
  return s;
}

void throw_invalid_argument(const char* function, const std::string& message) {
  throw std::invalid_argument(std::string("kflash::") + function + ": " + message);
}

void require_initialized(const char* function) {
  if (!Kokkos::is_initialized())
    throw std::runtime_error(std::string("kflash::") + function +
                             ": Kokkos is not initialized (call Kokkos::initialize before any kflash call, "
                             "and none after Kokkos::finalize)");
}

std::string wrong_thread_message(const char* space) {
  return std::string("this host thread cannot launch ") + space + " kernels: Kokkos " +
         std::to_string(KOKKOS_VERSION / 10000) + "." + std::to_string(KOKKOS_VERSION / 100 % 100) +
         " runs them only from the thread that initialized it, outside parallel regions (Kokkos 4.4 and later "
         "run them from any host thread)";
}

void throw_wrong_thread(const char* function, const char* space) {
  throw std::runtime_error(std::string("kflash::") + function + ": " + wrong_thread_message(space));
}

std::recursive_mutex& call_lock() {
  static std::recursive_mutex lock;
  return lock;
}

}  // namespace kflash::impl
