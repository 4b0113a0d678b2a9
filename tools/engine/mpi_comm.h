// MPI communicator for CPU ranks (`mpirun -np N kiln train ...`), and the place where several
// processes agree on things (the NCCL unique id, AutoBatch's batch size). Collectives are
// non-blocking MPI calls polled against a deadline; at each collective every rank also posts a
// small "arrived at #k" note to its peers, so a rank that times out can name the ranks that never
// arrived. Tests: tests/mpi/ (run under mpirun by CTest).
#pragma once
#include <memory>

#include "core/comm.h"

namespace kiln {

// True when this process was started by mpirun with more than one rank.
bool launched_by_mpirun();
// This process's rank among the ranks of its machine (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID or
// SLURM_LOCALID; 0 when none is set): it picks the rank's GPU.
int local_rank();
// The number of ranks on this process's machine (OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS or
// SLURM_NTASKS_PER_NODE; 1 when none is set): CPU ranks of one machine share its memory.
int local_size();
// MPI communicator over MPI_COMM_WORLD (initialises MPI once). Throws when kiln was built without MPI.
std::unique_ptr<Communicator> make_mpi_communicator();
// Ends every rank of an MPI job (MPI_Abort) when MPI is running; otherwise does nothing. Called by
// the CLI after an error, so the other ranks do not wait for this one until their timeout.
void abort_job_if_mpi(int code);
// The communicator for this process: MPI when launched by mpirun with N > 1, else a single rank.
std::unique_ptr<Communicator> make_process_communicator();

}  // namespace kiln
