// Links kflash::mpi from an installed kflash (built, not run: running needs mpirun).
#include <kflash/mpi.hpp>

int main(int argc, char* argv[]) {
  MPI_Init(&argc, &argv);
  const MPI_Datatype state = kflash::mpi::state_type<float>();
  int size = 0;
  MPI_Type_size(state, &size);
  MPI_Finalize();
  return size == int(sizeof(kflash::SoftmaxState<float>)) ? 0 : 1;
}
