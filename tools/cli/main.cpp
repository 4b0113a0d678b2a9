// kiln: the command line. Every command's errors are caught here, printed as one line, exit 1.
#include <iostream>
#include <string>
#include <vector>

#include "core/check.h"

namespace kiln {
void abort_job_if_mpi(int code);  // tools/engine/mpi_comm.h
namespace cli {
int run(const std::vector<std::string>& args);  // tools/cli/cli.cpp
}
}  // namespace kiln

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    return kiln::cli::run(args);
  } catch (const std::exception& e) {
    std::cerr << "kiln: error: " << e.what() << std::endl;
    kiln::abort_job_if_mpi(1);  // bring the other ranks down now rather than at their timeout
    return 1;
  }
}
