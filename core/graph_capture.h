// Capturing the work queued on a device once and replaying it with one launch (CUDA graphs), behind
// device-neutral functions so that tools/engine's captured training step (tools/engine/cuda_graph.h)
// names no CUDA type. The CUDA kernels are core/cuda/graph_cuda.cu; docs/cuda_backend.md, "CUDA graphs".
//
//   begin_capture(d);                         // d's stream records instead of running; allocations
//   ... queue work with ordinary ops ...      // come from a private pool of d's caching allocator
//   std::shared_ptr<CapturedWork> g = end_capture(d);   // throws, naming why, when the capture failed
//   g->replay();                              // the same kernels on the same addresses, once more
//
// What the work read from the host (kernel arguments, host scalars) is frozen at capture: callers
// capture only work whose host inputs do not change between replays. Work that cannot be captured
// (a read back to the host, a synchronisation, an allocation from the system) makes end_capture
// throw; after any exception between begin and end, abandon_capture(d) ends the capture and
// releases its pool. A device with no capture kernel (the CPU) has can_capture() false.
#pragma once
#include <memory>

#include "core/device.h"
#include "core/kernel_slot.h"

namespace kiln {

class CapturedWork {
 public:
  virtual ~CapturedWork() = default;  // releases the graph and its private pool
  virtual void replay() = 0;          // queued on the device's stream; returns without waiting
};

bool can_capture(Device d);
void begin_capture(Device d);
std::shared_ptr<CapturedWork> end_capture(Device d);
void abandon_capture(Device d) noexcept;

extern KernelSlot<void (*)(int index)> begin_capture_kernel;
extern KernelSlot<std::shared_ptr<CapturedWork> (*)(int index)> end_capture_kernel;
extern KernelSlot<void (*)(int index)> abandon_capture_kernel;

}  // namespace kiln
