// kiln_version(): KILN_VERSION_STRING is set for this file only (core/CMakeLists.txt).
#include "core/version.h"

namespace kiln {

const char* kiln_version() { return KILN_VERSION_STRING; }

}  // namespace kiln
