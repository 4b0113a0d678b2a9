// `kiln info`: what kiln was built with and what it can see.
#include <dnnl.hpp>
#include <iostream>
#include <thread>

#include "core/device.h"
#include "core/version.h"
#include "tools/cli/commands.h"

namespace kiln::cli {

int cmd_info(const Args& args) {
  static const char* kUsage = "usage: kiln info\n  what kiln was built with (oneDNN, CUDA) and the devices it sees";
  if (wants_help(args, kUsage)) return 0;
  const dnnl_version_t* v = dnnl_version();
  std::cout << "kiln " << kiln_version() << "\n"
            << "  oneDNN       " << v->major << "." << v->minor << "." << v->patch << " (cpu runtime "
            << (v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other") << ")\n"
            << "  CPU threads  " << std::thread::hardware_concurrency() << "\n"
            << "  CUDA         " << (cuda_compiled() ? "compiled" : "not compiled") << "\n";
  int n = cuda_device_count();
  std::cout << "devices:\n  cpu\n";
  for (int i = 0; i < n; ++i) std::cout << "  cuda:" << i << "\n";
  return 0;
}

}  // namespace kiln::cli
