// Inverted dropout: the op (checks, the generator state, one backward closure); the kernels are the
// device's kernel slots (dropout.h: core/cpu/dropout.cpp, core/cuda/dropout_cuda.cu).
// Tests: tests/core/dropout_test.cpp, tests/gpu/dropout_test.cpp.
#include "core/ops/dropout.h"

#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/nn_util.h"
#include "core/rng.h"

namespace kiln {
KILN_DEFINE_KERNEL_SLOT(dropout_forward);
KILN_DEFINE_KERNEL_SLOT(dropout_backward);
}  // namespace kiln

namespace kiln::ops {

Tensor dropout(const Tensor& x, double p, bool training) {
  const Device d = op_device("dropout", {x});
  nn::check_floating("dropout", "x", x);
  KILN_CHECK(p >= 0 && p < 1, "dropout: p must be in [0, 1), got ", p, " (x ", x.str(), ")");
  if (!training || p == 0 || x.numel() == 0) return x;
  const auto forward = dropout_forward_kernel.get(d, "dropout");
  const auto backward = dropout_backward_kernel.get(d, "dropout");
  // The mask's counters are reserved on the host, whatever the device: the same mask everywhere.
  RngState state = default_generator().advance(static_cast<uint64_t>(x.numel()));
  Tensor y = forward(x.detach(), p, state);
  return record("dropout", {x}, y, [backward, state, p, dt = x.dtype()](const Tensor& gy) {
    Tensor dx = backward(gy, p, state);
    return grads{dx.dtype() == dt ? dx : dx.to(dt)};
  });
}

}  // namespace kiln::ops
