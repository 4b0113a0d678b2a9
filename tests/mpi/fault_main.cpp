// Fault scenarios for CTest, under `mpirun -np 2`:
//   (no argument) rank 1 hangs (never joins the all-reduce): rank 0 must give up after its timeout
//                 with an error naming rank 1 and abort the job, so that mpirun exits instead of
//                 hanging. CTest checks the message (PASS_REGULAR_EXPRESSION).
//   die           rank 1 dies (exits at once with status 3, no MPI_Finalize) while rank 0 waits in
//                 an all-reduce: the job must end non-zero well within the test's time limit
//                 (mpirun tears rank 0 down, or rank 0's timeout names rank 1), not hang.
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <string>
#include <thread>

#include "tools/engine/mpi_comm.h"

int main(int argc, char** argv) {
  const bool die = argc > 1 && std::string(argv[1]) == "die";
  auto comm = kiln::make_process_communicator();
  comm->set_timeout(std::chrono::seconds(die ? 10 : 2));
  if (die && comm->rank() == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    _exit(3);  // a crash: no cleanup, no MPI_Finalize
  }
  if (comm->rank() == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(60));  // a hung rank
    return 0;
  }
  try {
    comm->all_reduce_sum(kiln::Tensor::ones({4}));
    std::cerr << "unexpected: the all-reduce finished\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "kiln: error: " << e.what() << std::endl;
    comm->abort(1);
  }
  return 1;
}
