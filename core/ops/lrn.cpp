// Local response normalisation: the op (checks, one backward closure); the kernels are the device's
// kernel slots (lrn.h: core/cpu/lrn.cpp, core/cuda/lrn_cuda.cu). Tests: tests/core/lrn_test.cpp.
#include "core/ops/lrn.h"

#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/nn_util.h"

namespace kiln {
KILN_DEFINE_KERNEL_SLOT(lrn_forward);
KILN_DEFINE_KERNEL_SLOT(lrn_backward);
}  // namespace kiln

namespace kiln::ops {

Tensor local_response_norm(const Tensor& x, int64_t size, double alpha, double beta, double k) {
  const Device d = op_device("local_response_norm", {x});
  nn::check_floating("local_response_norm", "x", x);
  KILN_CHECK(x.dim() >= 2, "local_response_norm: x must be (N, C) or (N, H, W, C) with channels last, got ", x.str());
  KILN_CHECK(size >= 1, "local_response_norm: size must be >= 1, got ", size, " (x ", x.str(), ")");
  const auto backward = lrn_backward_kernel.get(d, "local_response_norm");
  Tensor y = lrn_forward_kernel.get(d, "local_response_norm")(x.detach(), size, alpha, beta, k);
  return record("local_response_norm", {x}, y, [backward, xd = x.detach(), size, alpha, beta, k](const Tensor& gy) {
    return grads{backward(gy, xd, size, alpha, beta, k)};
  });
}

}  // namespace kiln::ops
