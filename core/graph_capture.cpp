#include "core/graph_capture.h"

#include "core/check.h"

namespace kiln {

KILN_DEFINE_KERNEL_SLOT(begin_capture);
KILN_DEFINE_KERNEL_SLOT(end_capture);
KILN_DEFINE_KERNEL_SLOT(abandon_capture);

bool can_capture(Device d) { return begin_capture_kernel.find(d, "can_capture") != nullptr; }

void begin_capture(Device d) { begin_capture_kernel.get(d, "begin_capture")(d.index); }

std::shared_ptr<CapturedWork> end_capture(Device d) { return end_capture_kernel.get(d, "end_capture")(d.index); }

void abandon_capture(Device d) noexcept {
  try {
    if (const auto f = abandon_capture_kernel.find(d, "abandon_capture")) f(d.index);
  } catch (...) {  // nothing to add: the caller is already handling the error that brought it here
  }
}

}  // namespace kiln
