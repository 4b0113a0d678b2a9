// kiln: the command line. Every command's errors are caught here, printed as one line, exit 1.
#include <iostream>
#include <string>
#include <vector>

#include "core/check.h"

namespace kiln::cli {
int run(const std::vector<std::string>& args);  // tools/cli.cpp
}

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    return kiln::cli::run(args);
  } catch (const std::exception& e) {
    std::cerr << "kiln: error: " << e.what() << "\n";
    return 1;
  }
}
