// kflash: softmax and attention on the online-softmax recurrence, for every Kokkos backend.
#pragma once

#include <kflash/attention.hpp>
#include <kflash/attention_backward.hpp>
#include <kflash/attention_state.hpp>
#include <kflash/attention_stream.hpp>
#include <kflash/cross_entropy.hpp>
#include <kflash/cross_entropy_backward.hpp>
#include <kflash/softmax.hpp>
#include <kflash/softmax_backward.hpp>
#include <kflash/softmax_state.hpp>
#include <kflash/softmax_stream.hpp>
#include <kflash/version.hpp>

#include <iosfwd>

namespace kflash {

/// Writes the kflash version, the Kokkos version and the backends kflash was built with.
void print_configuration(std::ostream& os);

}  // namespace kflash
