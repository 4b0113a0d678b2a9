// Fault scenario for CTest: under `mpirun -np 2`, rank 1 hangs (never joins the all-reduce);
// rank 0 must give up after its timeout with an error naming rank 1, and abort the job, so that
// mpirun exits instead of hanging. CTest checks the message (PASS_REGULAR_EXPRESSION).
#include <chrono>
#include <iostream>
#include <thread>

#include "tools/mpi_comm.h"

int main() {
  auto comm = kiln::make_process_communicator();
  comm->set_timeout(std::chrono::seconds(2));
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
