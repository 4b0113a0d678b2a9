// ops::bn_finalize (core/ops/conv_fusion.h): the op, over the kernels of core/ops/bn_finalize.h, and the
// chain of public ops it was first written as (bn_finalize_unfused).
#include "core/ops/bn_finalize.h"

#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"

namespace kiln {
KILN_DEFINE_KERNEL_SLOT(bn_finalize_forward);
KILN_DEFINE_KERNEL_SLOT(bn_finalize_backward);
}  // namespace kiln

namespace kiln::ops {

namespace {
constexpr const char* kOp = "bn_finalize";

void check_args(const Tensor& sum, const Tensor& sumsq, int64_t count, const Tensor& gamma, const Tensor& beta,
                const Tensor& running_mean, const Tensor& running_var) {
  KILN_CHECK(sum.defined() && sumsq.defined() && sum.dim() == 1 && sumsq.shape() == sum.shape(), kOp,
             ": sum and sumsq must be (C) tensors of one shape, got ", sum.defined() ? sum.str() : "undefined", " and ",
             sumsq.defined() ? sumsq.str() : "undefined");
  KILN_CHECK(count >= 2, kOp, ": count ", count, ": needs at least 2 values per channel (the unbiased variance)");
  KILN_CHECK(running_mean.defined() == running_var.defined(), kOp,
             ": running_mean and running_var must both be defined or both undefined");
  const int64_t C = sum.shape()[0];
  for (const Tensor* t : {&gamma, &beta, &running_mean, &running_var})
    KILN_CHECK(!t->defined() || (t->dim() == 1 && t->shape()[0] == C), kOp, ": ", t->str(), " must be (", C,
               ") like sum ", sum.str());
  KILN_CHECK(!running_mean.defined() || (running_mean.dtype() == DType::f32 && running_var.dtype() == DType::f32), kOp,
             ": running statistics must be f32, got ", running_mean.str(), " and ", running_var.str());
}

bool is_f32(const Tensor& t) { return !t.defined() || t.dtype() == DType::f32; }
}  // namespace

BnFinalized bn_finalize_unfused(const Tensor& sum, const Tensor& sumsq, int64_t count, const Tensor& gamma,
                                const Tensor& beta, const Tensor& running_mean, const Tensor& running_var,
                                double momentum, double eps, DType out) {
  check_args(sum, sumsq, count, gamma, beta, running_mean, running_var);
  const int64_t C = sum.shape()[0];
  // Recorded where an input needs a gradient (the batch norm's backward through its statistics).
  auto f32 = [](const Tensor& t) { return t.dtype() == DType::f32 ? t : t.to(DType::f32); };
  const double n = static_cast<double>(count);
  Tensor mean = mul_scalar(f32(sum), 1.0 / n);
  Tensor var = relu(sub(mul_scalar(f32(sumsq), 1.0 / n), square(mean)));
  Tensor invstd = div(Tensor::ones({C}, DType::f32, sum.device()), sqrt(add_scalar(var, eps)));
  Tensor scale = gamma.defined() ? mul(f32(gamma), invstd) : invstd;
  Tensor bias = sub(beta.defined() ? f32(beta) : Tensor::zeros({C}, DType::f32, sum.device()), mul(mean, scale));
  if (running_mean.defined()) {
    NoGradGuard ng;
    const Tensor m = mean.detach(), v = var.detach();
    copy_tensor(running_mean, add(mul_scalar(running_mean.detach(), 1.0 - momentum), mul_scalar(m, momentum)));
    copy_tensor(running_var,
                add(mul_scalar(running_var.detach(), 1.0 - momentum), mul_scalar(v, momentum * n / (n - 1.0))));
  }
  return {scale.dtype() == out ? scale : scale.to(out), bias.dtype() == out ? bias : bias.to(out), mean, invstd};
}

BnFinalized bn_finalize(const Tensor& sum, const Tensor& sumsq, int64_t count, const Tensor& gamma, const Tensor& beta,
                        const Tensor& running_mean, const Tensor& running_var, double momentum, double eps, DType out) {
  check_args(sum, sumsq, count, gamma, beta, running_mean, running_var);
  const Device d = op_device(kOp, {sum, sumsq, gamma, beta, running_mean, running_var});
  const auto fwd = bn_finalize_forward_kernel.find(d);
  const auto bwd = bn_finalize_backward_kernel.find(d);
  const bool kernels = fwd != nullptr && bwd != nullptr && is_f32(sum) && is_f32(sumsq) && is_f32(gamma) &&
                       is_f32(beta) && (out == DType::f32 || out == DType::bf16 || out == DType::f16);
  if (!kernels) return bn_finalize_unfused(sum, sumsq, count, gamma, beta, running_mean, running_var, momentum, eps, out);
  const int64_t C = sum.shape()[0];
  auto packed = [](const Tensor& t) { return t.defined() ? t.detach().contiguous() : Tensor(); };
  BnFinalizeForward r = fwd(packed(sum), packed(sumsq), count, packed(gamma), packed(beta), running_mean, running_var,
                            momentum, eps, out);
  Tensor sb = record(kOp, {sum, sumsq, gamma, beta}, r.scale_bias,
                     [bwd, saved = r.saved, gd = packed(gamma), count, C](const Tensor& g) {
                       NoGradGuard ng;
                       const Tensor gf = (g.dtype() == DType::f32 ? g : g.to(DType::f32)).contiguous();
                       const Tensor o = bwd(gf, saved, gd, count);  // (4, C)
                       grads out;
                       for (int64_t i = 0; i < 4; ++i) out.push_back(o.slice(0, i, i + 1).reshape({C}));
                       return out;
                     });
  const Tensor mean = r.saved.slice(0, 0, 1).reshape({C}), invstd = r.saved.slice(0, 1, 2).reshape({C});
  return {sb.slice(0, 0, 1).reshape({C}), sb.slice(0, 1, 2).reshape({C}), mean, invstd};
}

}  // namespace kiln::ops
