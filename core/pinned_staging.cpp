// PinnedStaging (core/pinned.h): rings of pinned buffers, in every build (without CUDA,
// empty_pinned() gives ordinary tensors and nothing is staged).
#include "core/check.h"
#include "core/pinned.h"
#include "core/device.h"

namespace kiln {

PinnedStaging::PinnedStaging(int depth) : depth_(depth) {
  KILN_CHECK(depth >= 1, "PinnedStaging: depth = ", depth, " must be >= 1");
}

Tensor PinnedStaging::buffer(const Shape& shape, DType dtype, size_t role) {
  if (cuda_device_count() == 0) return Tensor::empty(shape, dtype, Device::cpu());
  if (slots_.size() <= role) {
    slots_.resize(role + 1, std::vector<Tensor>(static_cast<size_t>(depth_)));
    next_.resize(role + 1, 0);
  }
  Tensor& slot = slots_[role][next_[role]];
  next_[role] = (next_[role] + 1) % static_cast<size_t>(depth_);
  if (slot.defined()) wait_host_copies(slot);  // the upload that last read it: done before a refill or a free
  if (!slot.defined() || slot.shape() != shape || slot.dtype() != dtype) slot = empty_pinned(shape, dtype);
  return slot;
}

Tensor PinnedStaging::stage(const Tensor& t, size_t role) {
  if (!t.defined() || !t.device().is_cpu() || is_pinned(t) || cuda_device_count() == 0) return t;
  Tensor buf = buffer(t.shape(), t.dtype(), role);
  buf.copy_(t);
  return buf;
}

}  // namespace kiln
