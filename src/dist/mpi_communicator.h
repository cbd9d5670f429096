// The communicator of CPU ranks: Open MPI (or any MPI) over the processes mpirun / srun started, or that
// `m3` self-spawned under mpirun (dist/launch.h). Built when CMake finds MPI (M3_HAVE_MPI).
#pragma once

#include <memory>

#include "dist/communicator.h"

namespace m3::dist {

// True when this binary was built with MPI.
bool mpi_built();

// Initialises MPI (once per process) and returns MPI_COMM_WORLD as a communicator. A collective that has not
// completed after `timeout_s` seconds aborts every rank (MPI_Abort) with an error naming the stuck rank and
// the collective. Throws kUnsupported when the binary has no MPI.
std::shared_ptr<Communicator> join_mpi_world(double timeout_s);

}  // namespace m3::dist
