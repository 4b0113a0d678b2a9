// The one selector of a device's kernel table (see kernels.h), and the one place outside core/cuda/
// where the build's CUDA switch is read: in a build without CUDA it also answers core/device.h's
// cuda_compiled() and cuda_device_count() (with CUDA, core/cuda/runtime.cu answers them).
#include "core/kernels.h"

namespace kiln {

#ifdef KILN_WITH_CUDA
static const Kernels* cuda_table() { return &cuda::kernels(); }
#else
static const Kernels* cuda_table() { return nullptr; }
int cuda_device_count() { return 0; }
bool cuda_compiled() { return false; }
#endif

const Kernels& kernels(Device device) {
  if (device.is_cpu()) return cpu::kernels();
  if (device.is_cuda() && cuda_table()) return *cuda_table();
  KILN_FAIL("no kernels for device ", device.str(), " (this build of kiln has the CPU's only)");
}

}  // namespace kiln
