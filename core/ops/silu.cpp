// SiLU: the op (see silu.h). Written once for every device: the kernels come from its slots (silu.h).
#include "core/ops/silu.h"

#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/nn_util.h"

namespace kiln {
KILN_DEFINE_KERNEL_SLOT(silu_forward);
KILN_DEFINE_KERNEL_SLOT(silu_backward);
}  // namespace kiln

namespace kiln::ops {

Tensor silu(const Tensor& x) {
  const Device d = op_device("silu", {x});
  nn::check_floating("silu", "x", x);
  const auto backward = silu_backward_kernel.get(d, "silu");
  Tensor y = silu_forward_kernel.get(d, "silu")(x.detach());
  return record("silu", {x}, y, [backward, xd = x.detach()](const Tensor& gy) {
    Tensor dx = backward(gy, xd);
    return grads{dx.dtype() == xd.dtype() ? dx : dx.to(xd.dtype())};
  });
}

}  // namespace kiln::ops
