// kiln's version: the CMake project's (CMakeLists.txt), as `kiln --version` and `kiln info` print it.
// Tests: tests/cli/cli_help_test.cpp (CliHelp.VersionIsTheProjects).
#pragma once

namespace kiln {

// "0.1.0"
const char* kiln_version();

}  // namespace kiln
