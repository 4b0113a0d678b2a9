// kiln's command line as a library function. A program that registers its own components (core/registry.h)
// builds its own `kiln`, with every command (train, eval, predict, export, config, bench, data) and its
// components listed by `kiln train --help`, from one line (docs/library.md, example user_kiln.cpp):
//   int main(int argc, char** argv) { return kiln::cli::main(argc, argv); }
// Tests: tests/cli/cli_help_test.cpp, tests/install/install_test.sh.
#pragma once
#include <string>
#include <vector>

namespace kiln::cli {

// Runs the command named by argv[1] with the rest; prints an error as one line "kiln: error: ..." and
// returns 1 for a failure (under mpirun, the other ranks are brought down too); else the command's code.
int main(int argc, char** argv);
// The same without the catch: the command's exit code, or the exception it threw.
int run(const std::vector<std::string>& args);

}  // namespace kiln::cli
