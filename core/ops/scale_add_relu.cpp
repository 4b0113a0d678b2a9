// scale_add_relu: the op (see scale_add_relu.h). The fused kernel where the device has one and the
// tensors are f32, else the parts.
#include "core/ops/scale_add_relu.h"

#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/ops/nn_util.h"

namespace kiln {
KILN_DEFINE_KERNEL_SLOT(scale_add_relu_forward);
KILN_DEFINE_KERNEL_SLOT(scale_add_relu_backward);
}  // namespace kiln

namespace kiln::ops {

Tensor scale_add_relu(const Tensor& x, const Tensor& scale, const Tensor& residual) {
  const Device d = op_device("scale_add_relu", {x, scale, residual});
  nn::check_floating("scale_add_relu", "x", x);
  KILN_CHECK(x.dim() == 4 && residual.shape() == x.shape() && scale.shape() == Shape({x.size(0), x.size(3)}),
             "scale_add_relu: x ", x.str(), ", scale ", scale.str(), " and residual ", residual.str(),
             " are not accepted; accepted: x and residual (N, H, W, C) of one shape, scale (N, C)");
  KILN_CHECK(scale.dtype() == x.dtype() && residual.dtype() == x.dtype(), "scale_add_relu: x ", x.str(), ", scale ",
             scale.str(), " and residual ", residual.str(), " differ in dtype");
  const auto forward = scale_add_relu_forward_kernel.find(d, "scale_add_relu");
  const auto backward = scale_add_relu_backward_kernel.find(d, "scale_add_relu");
  if (forward == nullptr || backward == nullptr || x.dtype() != DType::f32)
    return relu(add(mul(x, scale.reshape({x.size(0), 1, 1, x.size(3)})), residual));
  const Tensor xd = x.detach().contiguous(), sd = scale.detach().contiguous();
  Tensor y = forward(xd, sd, residual.detach().contiguous());
  return record("scale_add_relu", {x, scale, residual}, y, [backward, xd, sd, yd = y.detach()](const Tensor& gy) {
    ScaleAddReluGrads g = backward(gy.contiguous(), yd, xd, sd);
    return grads{g.x, g.scale, g.residual};
  });
}

}  // namespace kiln::ops
