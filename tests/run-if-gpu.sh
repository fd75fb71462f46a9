#!/usr/bin/env bash
# Runs a test executable built for Kokkos::Cuda when this machine has a CUDA device; otherwise
# says so and exits 77, which ctest reports as "Skipped".
if ! nvidia-smi -L 2>/dev/null | grep -q "^GPU"; then
  echo "kflash: $(basename "$1") was built for CUDA but not run: no CUDA device on this machine"
  exit 77
fi
exec "$@"
