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

}  // namespace kflash::impl
