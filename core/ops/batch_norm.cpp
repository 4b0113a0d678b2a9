// Batch normalisation: the op (checks, one backward closure); the kernels fill the slots of
// batch_norm.h (core/cpu/batch_norm.cpp, core/cuda/batch_norm_cuda.cu). The forward
// hands the per-channel mean and invstd it used to the backward as saved tensors. batch_norm_relu
// (batch norm, residual add, ReLU) takes the fused kernels where the device has them.
// Tests: tests/core/batch_norm_test.cpp, tests/gpu/batch_norm_test.cpp, tests/gpu/ops_dispatch_test.cpp.
#include "core/ops/batch_norm.h"

#include <atomic>

#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/ops/nn_util.h"

namespace kiln {
KILN_DEFINE_KERNEL_SLOT(batch_norm_forward);
KILN_DEFINE_KERNEL_SLOT(batch_norm_backward);
KILN_DEFINE_KERNEL_SLOT(batch_norm_relu_forward);
KILN_DEFINE_KERNEL_SLOT(batch_norm_relu_backward);
KILN_DEFINE_KERNEL_SLOT(increment_i64);
}  // namespace kiln

namespace kiln::ops {

namespace {

void check_channel_vector(const Tensor& t, const char* what, const Tensor& x, int64_t C) {
  if (!t.defined()) return;
  nn::check_floating("batch_norm", what, t);
  KILN_CHECK(t.dim() == 1 && t.size(0) == C, "batch_norm: ", what, " must have shape [", C, "] (the channels of x ",
             x.str(), "), got ", t.str());
}

Tensor detached(const Tensor& t) { return t.defined() ? t.detach() : Tensor(); }

// The checks both ops share.
void check_args(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                const Tensor& running_var, bool training, double momentum, double eps) {
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
}

// What both ops' backwards keep: the forward's input and gamma, the statistics it used, the
// kernel's own state; cast() brings the kernels' gradients to the inputs' dtypes (dgamma/dbeta come
// in the compute dtype; none for a parameter that is not given).
struct BnBackwardState {
  Tensor xd, gd, save_mean, save_invstd;
  std::shared_ptr<void> saved;  // the kernel's own state (cuDNN's reserve space), if any
  bool training = true, need_dx = false, has_gamma = false, has_beta = false;
  DType x_t = DType::f32, gamma_t = DType::f32, beta_t = DType::f32;

  BnBackwardState(const Tensor& x, const Tensor& gamma, const Tensor& beta, bool train)
      : xd(x.detach()), gd(detached(gamma)), training(train), need_dx(x.requires_grad()),
        has_gamma(gamma.defined()), has_beta(beta.defined()), x_t(x.dtype()),
        gamma_t(gamma.defined() ? gamma.dtype() : x.dtype()), beta_t(beta.defined() ? beta.dtype() : x.dtype()) {}

  grads cast(const BatchNormGradients& g) const {
    auto as = [](bool want, const Tensor& t, DType dt) { return !want ? Tensor() : t.dtype() == dt ? t : t.to(dt); };
    return grads{as(need_dx, g.dx, x_t), as(has_gamma, g.dgamma, gamma_t), as(has_beta, g.dbeta, beta_t)};
  }
};

std::atomic<bool> g_fused{env_switch_on("KILN_FUSED_BN_RELU")};
}  // namespace

void set_batch_norm_relu_fused(bool on) { g_fused.store(on); }
bool batch_norm_relu_fused() { return g_fused.load(std::memory_order_relaxed); }

Tensor batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                  const Tensor& running_var, bool training, double momentum, double eps) {
  const Device d = op_device("batch_norm", {x, gamma, beta, running_mean, running_var});
  check_args(x, gamma, beta, running_mean, running_var, training, momentum, eps);
  const auto forward = batch_norm_forward_kernel.get(d, "batch_norm");
  const auto backward = batch_norm_backward_kernel.get(d, "batch_norm");
  BnBackwardState bw(x, gamma, beta, training);
  const bool rec = needs_record({x, gamma, beta});
  Tensor y = forward(x.detach(), bw.gd, detached(beta), detached(running_mean), detached(running_var), training,
                     momentum, eps, rec ? &bw.save_mean : nullptr, rec ? &bw.save_invstd : nullptr,
                     rec ? &bw.saved : nullptr);
  return record("batch_norm", {x, gamma, beta}, y, [backward, bw = std::move(bw)](const Tensor& gy) {
    return bw.cast(backward(gy, bw.xd, bw.gd, bw.save_mean, bw.save_invstd, bw.saved, bw.training, bw.need_dx));
  });
}

Tensor batch_norm_relu(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                       const Tensor& running_var, bool training, double momentum, double eps, const Tensor& residual) {
  const Device d = op_device("batch_norm_relu", {x, gamma, beta, running_mean, running_var, residual});
  check_args(x, gamma, beta, running_mean, running_var, training, momentum, eps);
  KILN_CHECK(!residual.defined() || (residual.shape() == x.shape() && residual.dtype() == x.dtype()),
             "batch_norm_relu: residual ", residual.str(), " must have the shape and dtype of x ", x.str());
  const auto fused = batch_norm_relu_fused() ? batch_norm_relu_forward_kernel.find(d, "batch_norm_relu") : nullptr;
  if (!fused) {  // this device has no fused kernel (or it is switched off): the three ops
    Tensor y = batch_norm(x, gamma, beta, running_mean, running_var, training, momentum, eps);
    return relu(residual.defined() ? add(y, residual) : y);
  }
  const auto backward = batch_norm_relu_backward_kernel.get(d, "batch_norm_relu");
  BnBackwardState bw(x, gamma, beta, training);
  const bool rec = needs_record({x, gamma, beta, residual});
  Tensor y = fused(x.detach(), bw.gd, detached(beta), detached(running_mean), detached(running_var), training,
                   momentum, eps, detached(residual), rec ? &bw.save_mean : nullptr, rec ? &bw.save_invstd : nullptr,
                   rec ? &bw.saved : nullptr);
  // relu's backward on y, then batch norm's; the residual's gradient is relu's (the add passes it on).
  return record("batch_norm_relu", {x, gamma, beta, residual}, y,
                [backward, bw = std::move(bw), yd = y.detach(), bd = detached(beta),
                 has_residual = residual.defined()](const Tensor& gy) {
                  BatchNormGradients g = backward(gy, yd, bw.xd, bw.gd, bd, bw.save_mean, bw.save_invstd, bw.saved,
                                                  bw.training, bw.need_dx, has_residual);
                  grads out = bw.cast(g);
                  out.push_back(has_residual ? g.dresidual : Tensor());
                  return out;
                });
}

}  // namespace kiln::ops
