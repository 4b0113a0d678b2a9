// SiLU: the op (see silu.h). Written once for every device: the kernels come from the table.
#include "core/ops/silu.h"

#include "core/autograd.h"
#include "core/kernels.h"
#include "core/ops/dispatch.h"
#include "core/ops/nn_util.h"

namespace kiln::ops {

Tensor silu(const Tensor& x) {
  const Device d = op_device("silu", {x});
  nn::check_floating("silu", "x", x);
  const auto backward = kernel(d, &Kernels::silu_backward, "silu");
  Tensor y = kernel(d, &Kernels::silu_forward, "silu")(x.detach());
  return record("silu", {x}, y, [backward, xd = x.detach()](const Tensor& gy) {
    Tensor dx = backward(gy, xd);
    return grads{dx.dtype() == xd.dtype() ? dx : dx.to(xd.dtype())};
  });
}

}  // namespace kiln::ops
