// The definition of step_stats.h's kernel slot. Tests: tests/core/device_functions_test.cpp.
#include "core/step_stats.h"

namespace kiln {

KILN_DEFINE_KERNEL_SLOT(accumulate_step_stats);

}  // namespace kiln
