# Spack recipe for kflash: `spack repo add <kflash>/spack`, then `spack install kflash`.
from spack.package import *


class Kflash(CMakePackage, CudaPackage):
    """Softmax, log_softmax, logsumexp and exact attention on the online-softmax recurrence,
    written once on Kokkos for its Serial, OpenMP and CUDA backends, with C and Fortran
    interfaces and an MPI component."""

    homepage = "https://github.com/kflash/kflash"
    git = "https://github.com/kflash/kflash.git"

    maintainers("kflash")

    version("develop", branch="main")
    version("0.1.0", tag="v0.1.0")

    # Backends come from Kokkos, variant for variant (as ArborX and kokkos-fft do): kflash builds
    # for every backend of the Kokkos it finds, so a backend is turned off by a Kokkos without it.
    kokkos_backends = {"serial": (True, "the Serial backend"), "openmp": (True, "the OpenMP backend")}
    for backend, (default, description) in kokkos_backends.items():
        variant(backend, default=default, description="Build with Kokkos' " + description)
    variant("mpi", default=False, description="Build the kflash::mpi component (sharded rows, ring attention)")
    variant("fortran", default=True, description="Build the Fortran module kflash (kflash::kflash_fortran)")

    depends_on("cmake@3.18:", type="build")
    depends_on("kokkos@3.4:")
    conflicts("^kokkos std=14", msg="kflash needs C++17")
    for backend in kokkos_backends:
        depends_on("kokkos+" + backend, when="+" + backend)
    # CUDA: Kokkos with lambdas on the device and its nvcc_wrapper, for the same architecture.
    conflicts("+cuda", when="cuda_arch=none")
    for arch in CudaPackage.cuda_arch_values:
        depends_on(
            "kokkos+cuda+cuda_lambda+wrapper cuda_arch={0}".format(arch),
            when="+cuda cuda_arch={0}".format(arch),
        )
    depends_on("mpi", when="+mpi")

    def cmake_args(self):
        spec = self.spec
        args = [
            self.define("Kokkos_ROOT", spec["kokkos"].prefix),
            self.define("KFLASH_ENABLE_TESTS", False),
            self.define("KFLASH_ENABLE_PERF", False),
            self.define("KFLASH_ENABLE_INSTALL", True),
            self.define_from_variant("KFLASH_ENABLE_MPI", "mpi"),
            self.define_from_variant("KFLASH_ENABLE_FORTRAN", "fortran"),
        ]
        if spec.satisfies("+cuda"):
            args.append(self.define("CMAKE_CXX_COMPILER", spec["kokkos"].kokkos_cxx))
        return args

    # Stand-alone tests (`spack test run kflash`): the C and Fortran consumer projects of the
    # repository, built against the installed package and run.
    consumer_dir = join_path("tests", "consumer")

    @run_after("install")
    def cache_consumers(self):
        self.cache_extra_test_sources([self.consumer_dir])

    def _consumer(self, language):
        source = join_path(self.test_suite.current_test_cache_dir, self.consumer_dir, language)
        build = join_path(self.test_suite.current_test_data_dir, "build-" + language)
        cmake = which(self.spec["cmake"].prefix.bin.cmake)
        cmake(
            "-S",
            source,
            "-B",
            build,
            "-DCMAKE_PREFIX_PATH={0}".format(self.prefix),
            "-DCMAKE_CXX_COMPILER={0}".format(
                self.spec["kokkos"].kokkos_cxx if self.spec.satisfies("+cuda") else self.compiler.cxx
            ),
            "-DCMAKE_C_COMPILER={0}".format(self.compiler.cc),
            "-DCMAKE_Fortran_COMPILER={0}".format(self.compiler.fc or "gfortran"),
        )
        cmake("--build", build)
        if self.spec.satisfies("~cuda"):  # without a GPU a Cuda build cannot initialize Kokkos
            consumer = which(join_path(build, "consumer"))
            consumer(output=str.split, error=str.split)

    def test_c_consumer(self):
        """build and run a C program against the installed kflash"""
        self._consumer("c")

    def test_fortran_consumer(self):
        """build and run a Fortran program against the installed module"""
        if self.spec.satisfies("~fortran"):
            raise SkipTest("kflash was built without its Fortran module")
        self._consumer("fortran")
