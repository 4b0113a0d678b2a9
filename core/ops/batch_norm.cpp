// Batch normalisation: the op (checks, one backward closure); the kernels are the device's table
// entries (core/kernels.h: core/cpu/batch_norm.cpp, core/cuda/batch_norm_cuda.cu). The forward
// hands the per-channel mean and invstd it used to the backward as saved tensors.
// Tests: tests/core/batch_norm_test.cpp, tests/gpu/batch_norm_test.cpp, tests/gpu/ops_dispatch_test.cpp.
#include "core/ops/batch_norm.h"

#include "core/autograd.h"
#include "core/kernels.h"
#include "core/ops/dispatch.h"
#include "core/ops/nn_util.h"

namespace kiln::ops {

namespace {

void check_channel_vector(const Tensor& t, const char* what, const Tensor& x, int64_t C) {
  if (!t.defined()) return;
  nn::check_floating("batch_norm", what, t);
  KILN_CHECK(t.dim() == 1 && t.size(0) == C, "batch_norm: ", what, " must have shape [", C, "] (the channels of x ",
             x.str(), "), got ", t.str());
}

Tensor detached(const Tensor& t) { return t.defined() ? t.detach() : Tensor(); }

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                  const Tensor& running_var, bool training, double momentum, double eps) {
  const Device d = op_device("batch_norm", {x, gamma, beta, running_mean, running_var});
  nn::check_floating("batch_norm", "x", x);
  KILN_CHECK(x.dim() >= 2, "batch_norm: x must be (N, C) or (N, H, W, C) with channels last, got ", x.str());
  int64_t C = x.size(-1);
  KILN_CHECK(C > 0, "batch_norm: x has no channels: ", x.str());
  int64_t M = x.numel() / C;
  check_channel_vector(gamma, "gamma", x, C);
  check_channel_vector(beta, "beta", x, C);
  check_channel_vector(running_mean, "running_mean", x, C);
  check_channel_vector(running_var, "running_var", x, C);
  KILN_CHECK(running_mean.defined() == running_var.defined(),
             "batch_norm: running_mean and running_var must both be given or both be undefined");
  KILN_CHECK(training || running_mean.defined(), "batch_norm: eval mode needs running_mean and running_var (x ",
             x.str(), ")");
  KILN_CHECK(!training || M > 1, "batch_norm: training needs more than one value per channel, got x ", x.str());
  KILN_CHECK(eps > 0, "batch_norm: eps must be > 0, got ", eps);
  KILN_CHECK(momentum >= 0 && momentum <= 1, "batch_norm: momentum must be in [0, 1], got ", momentum);

  const auto forward = kernel(d, &Kernels::batch_norm_forward, "batch_norm");
  const auto backward = kernel(d, &Kernels::batch_norm_backward, "batch_norm");
  const bool rec = needs_record({x, gamma, beta});
  Tensor save_mean, save_invstd;  // the statistics the forward used: the backward's state
  std::shared_ptr<void> saved;    // and the kernel's own (cuDNN's reserve space), if any
  Tensor gd = detached(gamma);
  Tensor y = forward(x.detach(), gd, detached(beta), detached(running_mean), detached(running_var), training,
                     momentum, eps, rec ? &save_mean : nullptr, rec ? &save_invstd : nullptr, rec ? &saved : nullptr);
  // The kernels' dgamma/dbeta are in their compute dtype: brought to the parameters' dtypes here
  // (none for a parameter that is not given).
  const DType x_t = x.dtype();
  const DType gamma_t = gamma.defined() ? gamma.dtype() : x_t, beta_t = beta.defined() ? beta.dtype() : x_t;
  const bool need_dx = x.requires_grad(), has_gamma = gamma.defined(), has_beta = beta.defined();
  return record("batch_norm", {x, gamma, beta}, y,
                [backward, xd = x.detach(), gd, save_mean, save_invstd, saved, training, need_dx, has_gamma, has_beta,
                 x_t, gamma_t, beta_t](const Tensor& gy) {
                  BatchNormGradients g = backward(gy, xd, gd, save_mean, save_invstd, saved, training, need_dx);
                  auto as = [](bool want, const Tensor& t, DType dt) {
                    return !want ? Tensor() : t.dtype() == dt ? t : t.to(dt);
                  };
                  return grads{as(need_dx, g.dx, x_t), as(has_gamma, g.dgamma, gamma_t), as(has_beta, g.dbeta, beta_t)};
                });
}

}  // namespace kiln::ops
