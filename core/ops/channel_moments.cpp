// Per-channel sums with a one-pass backward: the op (see channel_moments.h).
#include "core/ops/channel_moments.h"

#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/nn_util.h"
#include "core/ops/reduce.h"
#include "core/ops/shape_ops.h"
#include "core/ops/elementwise.h"

namespace kiln {
KILN_DEFINE_KERNEL_SLOT(channel_moments_backward);
}  // namespace kiln

namespace kiln::ops {

namespace {
constexpr const char* kOp = "channel_moments";

void check_y(const Tensor& y) {
  nn::check_floating(kOp, "y", y);
  KILN_CHECK(y.dim() >= 2 && y.numel() > 0, kOp, ": y ", y.str(),
             " must be non-empty channels-last activations (N, ..., C)");
}
}  // namespace

ChannelMoments record_channel_moments(const Tensor& y, const Tensor& sum, const Tensor& sumsq) {
  const Device d = op_device(kOp, {y, sum, sumsq});
  check_y(y);
  const int64_t c = y.shape().back();
  for (const Tensor* t : {&sum, &sumsq})
    KILN_CHECK(t->dtype() == DType::f32 && t->dim() == 1 && t->shape()[0] == c, kOp, ": ", t->str(),
               " must be a (", c, ") f32 tensor (one sum per channel of y ", y.str(), ")");
  if (!needs_record({y})) return {sum, sumsq};
  const auto backward = channel_moments_backward_kernel.get(d, kOp);
  Tensor packed_sums;
  {
    NoGradGuard ng;
    packed_sums = concat({sum.detach().reshape({1, c}), sumsq.detach().reshape({1, c})}, 0);  // (2, C)
  }
  Tensor both = record(kOp, {y}, packed_sums, [backward, yd = y.detach().contiguous(), c](const Tensor& g) {
    NoGradGuard ng;
    const Tensor gf = (g.dtype() == DType::f32 ? g : g.to(DType::f32)).contiguous();
    return grads{backward(yd, gf.slice(0, 0, 1).reshape({c}).contiguous(), gf.slice(0, 1, 2).reshape({c}).contiguous())};
  });
  return {both.slice(0, 0, 1).reshape({c}), both.slice(0, 1, 2).reshape({c})};
}

ChannelMoments channel_moments(const Tensor& y) {
  op_device(kOp, {y});
  check_y(y);
  Tensor s, q;
  {
    NoGradGuard ng;
    const Tensor yd = y.detach();
    const Tensor yf = yd.dtype() == DType::f32 ? yd : yd.to(DType::f32);
    std::vector<int64_t> dims;
    for (int64_t i = 0; i + 1 < y.dim(); ++i) dims.push_back(i);
    s = sum(yf, dims);
    q = sum(square(yf), dims);
  }
  return record_channel_moments(y, s, q);
}

}  // namespace kiln::ops
