// GPU batch norm against PyTorch's formulas written out in double: training forward (batch mean,
// biased variance, running update with the unbiased variance), eval forward, both backwards;
// NHWC and (N, C) inputs, odd channel counts, a large mean (the shifted moments must not cancel),
// f32/f16/bf16 activations with f32 parameters, optional gamma/beta.
#include <gtest/gtest.h>

#include "tests/gpu/gpu_test_util.h"

#ifdef KILN_WITH_CUDA
#include "core/cuda/cuda_ops.h"
#include "core/ops/batch_norm.h"
#include "core/ops/elementwise.h"

using namespace kiln;
using kiln::gputest::gpu;
using kiln::gputest::rand_cpu;

namespace {

struct BnRef {
  std::vector<double> y, mean, var_biased, invstd, rm, rv, dx, dgamma, dbeta;
};

BnRef ref_bn(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& rm0, const Tensor& rv0,
             const Tensor& gy, bool training, double momentum, double eps) {
  int64_t C = x.size(-1), R = x.numel() / C;
  std::vector<double> xv = x.to_double_vector(), gv = gy.to_double_vector();
  std::vector<double> g = gamma.defined() ? gamma.to_double_vector() : std::vector<double>(C, 1.0);
  std::vector<double> b = beta.defined() ? beta.to_double_vector() : std::vector<double>(C, 0.0);
  BnRef r;
  r.rm = rm0.to_double_vector();
  r.rv = rv0.to_double_vector();
  r.mean.assign(C, 0.0);
  r.var_biased.assign(C, 0.0);
  for (int64_t i = 0; i < R; ++i)
    for (int64_t c = 0; c < C; ++c) r.mean[c] += xv[i * C + c] / static_cast<double>(R);
  for (int64_t i = 0; i < R; ++i)
    for (int64_t c = 0; c < C; ++c) {
      double d = xv[i * C + c] - r.mean[c];
      r.var_biased[c] += d * d / static_cast<double>(R);
    }
  std::vector<double> m = training ? r.mean : r.rm, v = training ? r.var_biased : r.rv;
  r.invstd.assign(C, 0.0);
  for (int64_t c = 0; c < C; ++c) r.invstd[c] = 1.0 / std::sqrt(v[c] + eps);
  if (training)
    for (int64_t c = 0; c < C; ++c) {
      r.rm[c] = (1 - momentum) * r.rm[c] + momentum * r.mean[c];
      r.rv[c] = (1 - momentum) * r.rv[c] + momentum * r.var_biased[c] * R / (R - 1);
    }
  r.y.resize(xv.size());
  r.dx.resize(xv.size());
  r.dgamma.assign(C, 0.0);
  r.dbeta.assign(C, 0.0);
  for (int64_t i = 0; i < R; ++i)
    for (int64_t c = 0; c < C; ++c) {
      double xh = (xv[i * C + c] - m[c]) * r.invstd[c];
      r.y[i * C + c] = xh * g[c] + b[c];
      r.dgamma[c] += gv[i * C + c] * xh;
      r.dbeta[c] += gv[i * C + c];
    }
  for (int64_t i = 0; i < R; ++i)
    for (int64_t c = 0; c < C; ++c) {
      double xh = (xv[i * C + c] - m[c]) * r.invstd[c];
      double d = gv[i * C + c];
      r.dx[i * C + c] = training ? g[c] * r.invstd[c] / R * (R * d - r.dbeta[c] - xh * r.dgamma[c])
                                 : g[c] * r.invstd[c] * d;
    }
  return r;
}

void check(const Shape& s, DType t, bool affine, double mean, uint64_t seed) {
  int64_t C = s.back();
  Tensor x = rand_cpu(s, seed, t, 2.0, mean);
  Tensor gamma = affine ? rand_cpu({C}, seed + 1, DType::f32, 0.5, 1.0) : Tensor();
  Tensor beta = affine ? rand_cpu({C}, seed + 2) : Tensor();
  Tensor rm = rand_cpu({C}, seed + 3, DType::f32, 0.1), rv = rand_cpu({C}, seed + 4, DType::f32, 0.1, 1.0);
  Tensor gy = rand_cpu(s, seed + 5, t);
  double momentum = 0.1, eps = 1e-5;
  std::string what = shape_str(s) + " " + dtype_name(t) + (affine ? " affine" : "") + " mean " + std::to_string(mean);
  double tol = 2 * gputest::rounding(t) + 2e-5;
  auto opt = [](const Tensor& v) { return v.defined() ? v.to(gpu()) : Tensor(); };
  {  // training
    BnRef r = ref_bn(x, gamma, beta, rm, rv, gy, true, momentum, eps);
    Tensor grm = rm.to(gpu()), grv = rv.to(gpu()), sm, si;
    Tensor y = cuda::batch_norm_forward_train(x.to(gpu()), opt(gamma), opt(beta), grm, grv, momentum, eps, &sm, &si);
    gputest::expect_near_all(y, r.y, tol, tol, "train y " + what);
    gputest::expect_near_all(sm, r.mean, 1e-5 * (1 + std::fabs(mean)), 1e-5, "save_mean " + what);
    gputest::expect_near_all(si, r.invstd, 1e-5, 1e-4, "save_invstd " + what);
    gputest::expect_near_all(grm, r.rm, 1e-5 * (1 + std::fabs(mean)), 1e-5, "running_mean " + what);
    gputest::expect_near_all(grv, r.rv, 1e-5, 1e-4, "running_var " + what);
    cuda::BatchNormGrads gr = cuda::batch_norm_backward_train(gy.to(gpu()), x.to(gpu()), opt(gamma), sm, si);
    gputest::expect_near_all(gr.dx, r.dx, tol, 10 * tol, "train dx " + what);
    EXPECT_EQ(gr.dgamma.defined(), affine);
    if (affine) {
      double n = std::sqrt(static_cast<double>(x.numel() / C));
      gputest::expect_near_all(gr.dgamma, r.dgamma, 1e-4 * n, 1e-4, "train dgamma " + what);
      gputest::expect_near_all(gr.dbeta, r.dbeta, 1e-4 * n, 1e-4, "train dbeta " + what);
    }
  }
  {  // eval
    BnRef r = ref_bn(x, gamma, beta, rm, rv, gy, false, momentum, eps);
    Tensor y = cuda::batch_norm_forward_eval(x.to(gpu()), opt(gamma), opt(beta), rm.to(gpu()), rv.to(gpu()), eps);
    gputest::expect_near_all(y, r.y, tol * (1 + std::fabs(mean)), tol, "eval y " + what);
    cuda::BatchNormGrads gr =
        cuda::batch_norm_backward_eval(gy.to(gpu()), x.to(gpu()), opt(gamma), rm.to(gpu()), rv.to(gpu()), eps);
    gputest::expect_near_all(gr.dx, r.dx, tol, tol, "eval dx " + what);
    if (affine) {
      double n = std::sqrt(static_cast<double>(x.numel() / C)) * (1 + std::fabs(mean));
      gputest::expect_near_all(gr.dgamma, r.dgamma, 1e-4 * n, 1e-4, "eval dgamma " + what);
    }
  }
}

// The registered training kernels (the op's path): cuDNN's persistent NHWC batch norm for f32/f16
// (N, H, W, C) when set_batch_norm_cudnn is on, kiln's kernels otherwise; both against the formulas.
// `want_cudnn`: 1 (0) when the forward must (must not) have taken cuDNN (it leaves its reserve in
// `saved`), -1 when either is right (bf16: cuDNN may refuse it); the path taken is printed.
// `mean`: the inputs' offset (1000: a large mean, which a one-pass E[x^2] - E[x]^2 would cancel).
void check_table(const Shape& s, DType t, bool affine, bool running, double eps, int want_cudnn, uint64_t seed,
                 double mean = 0.3) {
  int64_t C = s.back();
  Tensor x = rand_cpu(s, seed, t, 2.0, mean);
  Tensor gamma = affine ? rand_cpu({C}, seed + 1, DType::f32, 0.5, 1.0) : Tensor();
  Tensor beta = affine ? rand_cpu({C}, seed + 2) : Tensor();
  Tensor rm = rand_cpu({C}, seed + 3, DType::f32, 0.1), rv = rand_cpu({C}, seed + 4, DType::f32, 0.1, 1.0);
  Tensor gy = rand_cpu(s, seed + 5, t);
  const double momentum = 0.1;
  std::string what = shape_str(s) + " " + dtype_name(t) + (affine ? " affine" : "") + (running ? " running" : "") +
                     " eps " + std::to_string(eps) + " mean " + std::to_string(mean) +
                     (cuda::batch_norm_cudnn() ? " (cuDNN on)" : " (cuDNN off)");
  double tol = 2 * gputest::rounding(t) + 2e-5;
  const double ytol = tol * (1 + std::fabs(mean));  // x itself is rounded at the scale of its mean
  auto opt = [](const Tensor& v) { return v.defined() ? v.to(gpu()) : Tensor(); };
  BnRef r = ref_bn(x, gamma, beta, rm, rv, gy, true, momentum, eps);
  Tensor grm = running ? rm.to(gpu()) : Tensor(), grv = running ? rv.to(gpu()) : Tensor(), sm, si;
  std::shared_ptr<void> saved;
  Tensor y = batch_norm_forward_kernel.get(gpu())(x.to(gpu()), opt(gamma), opt(beta), grm, grv, true, momentum, eps,
                                                 &sm, &si, &saved);
  if (want_cudnn >= 0) {
    EXPECT_EQ(saved != nullptr, want_cudnn == 1) << what;
  } else {
    std::printf("path: batch_norm %s: %s\n", what.c_str(), saved ? "cuDNN" : "kiln's kernels (cuDNN refused)");
  }
  gputest::expect_near_all(y, r.y, ytol, tol, "table train y " + what);
  gputest::expect_near_all(sm, r.mean, 1e-5 * (1 + std::fabs(mean)), 1e-5, "table save_mean " + what);
  gputest::expect_near_all(si, r.invstd, 1e-5, 1e-4, "table save_invstd " + what);
  if (running) {
    gputest::expect_near_all(grm, r.rm, 1e-5 * (1 + std::fabs(mean)), 1e-5, "table running_mean " + what);
    gputest::expect_near_all(grv, r.rv, 1e-5, 1e-4, "table running_var " + what);
  }
  BatchNormGradients gr =
      batch_norm_backward_kernel.get(gpu())(gy.to(gpu()), x.to(gpu()), opt(gamma), sm, si, saved, true, true);
  gputest::expect_near_all(gr.dx, r.dx, ytol, 10 * tol, "table dx " + what);
  double n = std::sqrt(static_cast<double>(x.numel() / C));
  gputest::expect_near_all(gr.dgamma, r.dgamma, 1e-4 * n, 1e-4, "table dgamma " + what);
  gputest::expect_near_all(gr.dbeta, r.dbeta, 1e-4 * n, 1e-4, "table dbeta " + what);
}

}  // namespace

TEST(CudaBatchNorm, TableTrainingOnCudnnAndOnOwnKernels) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  const bool was = cuda::batch_norm_cudnn();
  for (bool on : {true, false}) {
    cuda::set_batch_norm_cudnn(on);
    for (DType t : {DType::f32, DType::f16}) {
      check_table({4, 7, 5, 3}, t, true, true, 1e-5, on, 11);
      check_table({8, 14, 14, 64}, t, false, false, 1e-3, on, 12);  // gamma/beta and running stats off
      check_table({2, 9, 9, 130}, t, true, false, 1e-5, on, 13);
    }
    check_table({4, 7, 5, 3}, DType::bf16, true, true, 1e-5, on ? -1 : 0, 14);  // bf16: cuDNN's if it takes it
    check_table({8, 14, 14, 64}, DType::bf16, true, true, 1e-5, on ? -1 : 0, 17);
    check_table({16, 37}, DType::f32, true, true, 1e-5, false, 15);       // (N, C): kiln's kernels
    check_table({4, 7, 5, 3}, DType::f32, true, true, 1e-6, on, 16);      // a small eps (cuDNN 9's minimum is 0)
    check_table({8, 16, 16, 8}, DType::f32, true, true, 1e-5, on, 18, 1000.0);  // a large mean on either path
  }
  cuda::set_batch_norm_cudnn(was);
}

TEST(CudaBatchNorm, ShapesAndDtypes) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    check({4, 7, 5, 3}, t, true, 0.0, 1);
    check({2, 9, 9, 64}, t, true, 0.5, 2);
    check({16, 37}, t, false, 0.0, 3);  // BatchNorm1d on (N, C)
    check({1, 1, 33, 1}, t, true, 0.0, 4);   // one channel: the row-reduction path
  }
  check({8, 14, 14, 130}, DType::f32, true, 0.0, 5);
}

TEST(CudaBatchNorm, LargeMeanDoesNotCancel) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  check({8, 16, 16, 5}, DType::f32, true, 1000.0, 6);
}

TEST(CudaBatchNorm, BadArguments) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  Tensor x = Tensor::zeros({2, 3, 3, 4}, DType::f32, gpu()), sm, si;
  Tensor c4 = Tensor::zeros({4}, DType::f32, gpu()), c5 = Tensor::zeros({5}, DType::f32, gpu());
  EXPECT_THROW(cuda::batch_norm_forward_train(x, c5, c4, c4, c4, 0.1, 1e-5, &sm, &si), Error);
  EXPECT_THROW(cuda::batch_norm_forward_train(Tensor::zeros({1, 4}, DType::f32, gpu()), c4, c4, c4, c4, 0.1, 1e-5, &sm,
                                              &si),
               Error);  // one value per channel
  EXPECT_THROW(cuda::batch_norm_forward_train(x, c4, c4, Tensor::zeros({4}, DType::bf16, gpu()), c4, 0.1, 1e-5, &sm,
                                              &si),
               Error);  // running stats must be f32
}

namespace {

// ops::batch_norm_relu on the GPU (the ResNet blocks' BN, add, ReLU) against the CPU in f64: y and
// the running statistics against relu(bn(x) + r); the gradients against the CPU's batch norm
// backward of gy masked by the GPU's own y (relu's mask is the output's sign, so values within
// rounding of 0 cannot flip the comparison). Returns whether the table's entry took cuDNN's fused call.
bool check_bn_relu(const Shape& s, DType t, bool with_residual, uint64_t seed) {
  const int64_t C = s.back();
  Tensor x = rand_cpu(s, seed, t, 2.0, 0.3), r = rand_cpu(s, seed + 1, t), gy = rand_cpu(s, seed + 2, t);
  Tensor gamma = rand_cpu({C}, seed + 3, DType::f32, 0.5, 1.0), beta = rand_cpu({C}, seed + 4);
  Tensor rm = rand_cpu({C}, seed + 5, DType::f32, 0.1), rv = rand_cpu({C}, seed + 6, DType::f32, 0.1, 1.0);
  const std::string what = shape_str(s) + " " + dtype_name(t) + (with_residual ? " residual" : "") +
                           (cuda::batch_norm_cudnn() ? " (cuDNN on)" : " (cuDNN off)");
  // The GPU: the op, as the blocks call it.
  Tensor gx = x.to(gpu()).set_requires_grad(true), gr = r.to(gpu()).set_requires_grad(true);
  Tensor gg = gamma.to(gpu()).set_requires_grad(true), gb = beta.to(gpu()).set_requires_grad(true);
  Tensor grm = rm.to(gpu()), grv = rv.to(gpu());
  Tensor y = ops::batch_norm_relu(gx, gg, gb, grm, grv, true, 0.1, 1e-5, with_residual ? gr : Tensor());
  y.backward(gy.to(gpu()));
  // The CPU in f64.
  auto f64 = [](const Tensor& v) { return v.to(DType::f64).set_requires_grad(true); };
  Tensor cx = f64(x), cr = f64(r), cg = f64(gamma), cb = f64(beta);
  Tensor crm = rm.to(DType::f64), crv = rv.to(DType::f64);
  Tensor bn = ops::batch_norm(cx, cg, cb, crm, crv, true, 0.1, 1e-5);
  Tensor want_y = ops::relu(with_residual ? ops::add(bn.detach(), cr.detach()) : bn.detach());
  Tensor g = ops::relu_backward(gy.to(DType::f64), y.detach().to(Device::cpu()).to(DType::f64));
  bn.backward(g);
  const double tol = 4 * gputest::rounding(t) + 2e-5, n = std::sqrt(static_cast<double>(x.numel() / C));
  gputest::expect_near_all(y, want_y.to_double_vector(), tol, tol, "y " + what);
  gputest::expect_near_all(gx.grad(), cx.grad().to_double_vector(), tol, 10 * tol, "dx " + what);
  gputest::expect_near_all(gg.grad(), cg.grad().to_double_vector(), 1e-4 * n + tol, 1e-3, "dgamma " + what);
  gputest::expect_near_all(gb.grad(), cb.grad().to_double_vector(), 1e-4 * n + tol, 1e-3, "dbeta " + what);
  if (with_residual) {
    gputest::expect_near_all(gr.grad(), g.to_double_vector(), tol, tol, "dresidual " + what);
  } else {
    EXPECT_FALSE(gr.grad().defined()) << what;
  }
  gputest::expect_near_all(grm, crm.to_double_vector(), 1e-5, 1e-5, "running_mean " + what);
  gputest::expect_near_all(grv, crv.to_double_vector(), 1e-5, 1e-4, "running_var " + what);
  // Which path the registered kernel took, for the log.
  std::shared_ptr<void> saved;
  Tensor sm, si;
  batch_norm_relu_forward_kernel.get(gpu())(x.to(gpu()), gamma.to(gpu()), beta.to(gpu()), Tensor(), Tensor(), true,
                                            0.1, 1e-5, with_residual ? r.to(gpu()) : Tensor(), &sm, &si, &saved);
  return cuda::batch_norm_saved_is_fused(saved);
}

}  // namespace

// The fused op on every GPU path: cuDNN's fused call where it takes the case (f16 NHWC at least),
// the batch norm plus add and relu elsewhere (what cuDNN refuses, cuDNN off), all against the CPU.
TEST(CudaBatchNormRelu, OpMatchesTheCpuOnEveryPath) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  const bool was = cuda::batch_norm_cudnn();
  for (bool on : {true, false}) {
    cuda::set_batch_norm_cudnn(on);
    for (DType t : {DType::f16, DType::f32, DType::bf16}) {
      for (bool residual : {true, false}) {
        const bool fused = check_bn_relu({8, 14, 14, 64}, t, residual, 30);
        if (!on) {
          EXPECT_FALSE(fused) << "cuDNN fused a case it was not given";
        } else {
          // f16, NHWC, packed, C % 4 == 0: the case cuDNN documents its fused persistent kernels for.
          // Failing here means a wrong argument made cuDNN refuse, and the fallback hid it.
          if (t == DType::f16) {
            EXPECT_TRUE(fused) << "cuDNN refused the fused f16 case" << (residual ? " + residual" : "");
          }
          // "path: " lines go to gpu_check.sh's summary
          std::printf("path: batch_norm_relu %s%s (8, 14, 14, 64): %s\n", dtype_name(t), residual ? " + residual" : "",
                      fused ? "cuDNN's fused BN_(ADD_)ACTIVATION" : "batch norm, then kiln's add and relu kernels");
        }
        check_bn_relu({4, 7, 5, 3}, t, residual, 40);  // odd channels
      }
    }
  }
  cuda::set_batch_norm_cudnn(was);
}

#endif  // KILN_WITH_CUDA
