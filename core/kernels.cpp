// The one selector of a device's kernel table (see kernels.h).
#include "core/kernels.h"

namespace kiln {

const Kernels& kernels(Device device) {
  if (device.is_cpu()) return cpu::kernels();
#ifdef KILN_WITH_CUDA
  if (device.is_cuda()) return cuda::kernels();
#endif
  KILN_FAIL("no kernels for device ", device.str(), " (this build of kiln has the CPU's only)");
}

}  // namespace kiln
