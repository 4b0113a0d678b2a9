// kiln_test_plugin_unlinked: links the static library kiln_test_plugin plainly and references nothing in
// it, so the linker drops its object file and with it the KILN_REGISTER objects (core/registry.h). The
// name must then fail with the registered names and the hint about linking (tests/CMakeLists.txt checks
// the output). Exit 0 when it failed so; 1 when the model was found (static registration survived a
// plain link: then this test and docs/library.md's advice are wrong on this toolchain).
#include <iostream>

#include "models/registry.h"

int main() {
  try {
    kiln::models::build_model({{"name", "plugin_net"}});
    std::cout << "plugin_net was registered without the library linked whole\n";
    return 1;
  } catch (const std::exception& e) {
    std::cout << e.what() << "\n";
    return 0;
  }
}
