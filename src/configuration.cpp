#include <kflash/kflash.hpp>

#include <ostream>

namespace kflash {

void print_configuration(std::ostream& os) {
  os << "kflash " << KFLASH_VERSION_STRING << " (configured with Kokkos " << KFLASH_KOKKOS_VERSION_STRING
     << ", backends: " << KFLASH_BACKENDS << "; host kernels: " << impl::host::isa_name(impl::host::isa())
     << (impl::host::bf16_rounding_instruction() ? ", bf16 rounded by vcvtneps2bf16" : "") << ")\n";
}

}  // namespace kflash
