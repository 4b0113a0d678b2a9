// See dispatch.h.
#include "core/ops/dispatch.h"

namespace kiln::ops {

Device op_device(const char* op, std::initializer_list<Tensor> ts) {
  const Tensor* first = nullptr;
  for (const Tensor& t : ts) {
    if (!t.defined()) continue;
    if (!first) {
      first = &t;
      continue;
    }
    KILN_CHECK(t.device() == first->device(), op, ": tensors on different devices: ", first->str(), " and ", t.str(),
               "; move them to one device with .to(device)");
  }
  if (!first) return Device::cpu();
  Device d = first->device();
  check_available(d, op);
  return d;
}

}  // namespace kiln::ops
