// kiln: the command line (tools/cli/cli.h). A program with its own components builds the same.
#include "tools/cli/cli.h"

int main(int argc, char** argv) { return kiln::cli::main(argc, argv); }
