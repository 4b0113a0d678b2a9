// Batch normalisation over the last (channel) dim, our own kernels: x is viewed as (R, C) rows of
// channels (NHWC: R = N*H*W), so every pass is a coalesced column reduction or a per-channel affine.
// This also covers (N, C) features and keeps the exact PyTorch semantics (unbiased running
// variance, eps inside the square root) without cuDNN's layout and mode restrictions.
//   forward (train): per channel sum(x - x0) and sum((x - x0)^2) in one pass, shifted by the first
//     row x0 so the variance does not cancel catastrophically when |mean| >> std; mean, biased var,
//     invstd and the running-stat update in f64 per channel; then y = (x - mean)*scale + beta.
//   backward: per channel S0 = sum(dy), S1 = sum(dy*(x - mean)) in one pass; dgamma = S1*invstd,
//     dbeta = S0; dx = k1*dy + k2*(x - mean) + k3 (train: the full formula through the batch
//     statistics; eval: dx = gamma*invstd*dy).
// NOTE: x - mean is formed before scaling (not x*scale + shift), so a large mean does not cost
// precision in the output.
// The kernel table (core/kernels.h) lists batch_norm_forward and batch_norm_backward at the end of
// this file: train and eval in one entry each, the statistics the forward used saved for the backward.
// Tests: tests/gpu/batch_norm_test.cpp, tests/gpu/ops_dispatch_test.cpp.
#include <cmath>

#include "core/cuda/cuda_ops.h"
#include "core/cuda/kernel_util.cuh"
#include "core/cuda/reduce_util.cuh"

namespace kiln::cuda {
namespace {

template <typename T>
struct LoadShifted {
  const T* x;
  int64_t C;
  __device__ Vals<2> operator()(int64_t, int64_t r, int64_t c) const {
    float v = to_float(x[r * C + c]) - to_float(x[c]);
    return {{v, v * v}};
  }
};

// coef: see channel_kernel.
template <typename T>
struct StoreStats {
  const T* x;
  int64_t R;
  double eps, momentum;
  const float *gamma, *beta;  // may be null
  float *save_mean, *save_invstd, *running_mean, *running_var, *coef;
  int64_t C;
  __device__ void operator()(int64_t, int64_t c, const double* s) const {
    double d = s[0] / static_cast<double>(R);
    double mean = static_cast<double>(to_float(x[c])) + d;
    double var = s[1] / static_cast<double>(R) - d * d;
    var = var < 0.0 ? 0.0 : var;  // not fmax: it would turn a NaN variance into 0
    double invstd = 1.0 / sqrt(var + eps);
    save_mean[c] = static_cast<float>(mean);
    save_invstd[c] = static_cast<float>(invstd);
    coef[c] = static_cast<float>((gamma ? gamma[c] : 1.0) * invstd);
    coef[C + c] = 0.f;
    coef[2 * C + c] = beta ? beta[c] : 0.f;
    coef[3 * C + c] = static_cast<float>(mean);
    if (running_mean) {
      running_mean[c] = static_cast<float>((1.0 - momentum) * running_mean[c] + momentum * mean);
      double unbiased = var * static_cast<double>(R) / static_cast<double>(R - 1);
      running_var[c] = static_cast<float>((1.0 - momentum) * running_var[c] + momentum * unbiased);
    }
  }
};

template <typename T>
struct LoadBackward {
  const T *dy, *x;
  const float* mean;
  int64_t C;
  __device__ Vals<2> operator()(int64_t, int64_t r, int64_t c) const {
    float g = to_float(dy[r * C + c]);
    return {{g, g * (to_float(x[r * C + c]) - mean[c])}};
  }
};

// coef: see channel_kernel.
struct StoreBackward {
  const float *mean, *invstd, *gamma;  // gamma may be null
  float *dgamma, *dbeta, *coef;        // dgamma/dbeta may be null
  int64_t R, C;
  bool training;
  __device__ void operator()(int64_t, int64_t c, const double* s) const {
    double is = invstd[c], gam = gamma ? gamma[c] : 1.0;
    if (dgamma) {
      dgamma[c] = static_cast<float>(s[1] * is);
      dbeta[c] = static_cast<float>(s[0]);
    }
    double k1 = gam * is, k2 = 0.0, k3 = 0.0;
    if (training) {
      double r = static_cast<double>(R);
      k2 = -gam * is * is * is * s[1] / r;
      k3 = -gam * is * s[0] / r;
    }
    coef[c] = static_cast<float>(k1);
    coef[C + c] = static_cast<float>(k2);
    coef[2 * C + c] = static_cast<float>(k3);
    coef[3 * C + c] = mean[c];
  }
};

// coef rows [k1, k2, k3, mean] (each C). Forward: out = k1*(x - mean) + k3 (k1 = gamma*invstd,
// k3 = beta). Backward: out = k1*dy + k2*(x - mean) + k3.
template <typename T, typename Index, bool kBackward>
__global__ void channel_kernel(const T* x, const T* dy, T* out, const float* coef, Index n, Index C) {
  for (Index i = blockIdx.x * Index(blockDim.x) + threadIdx.x; i < n; i += Index(gridDim.x) * blockDim.x) {
    Index c = i % C;
    float xm = to_float(x[i]) - coef[3 * C + c];
    float v;
    if constexpr (kBackward) v = coef[c] * to_float(dy[i]) + coef[C + c] * xm + coef[2 * C + c];
    else v = coef[c] * xm + coef[2 * C + c];
    out[i] = from_float<T>(v);
  }
}

// Eval: invstd = 1/sqrt(var + eps); coef = [gamma*invstd, 0, beta, mean]; mean_out (if not null) = mean.
__global__ void eval_coef_kernel(const float* mean, const float* var, const float* gamma, const float* beta, double eps,
                                 int64_t C, float* invstd, float* coef, float* mean_out) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < C; c += int64_t(gridDim.x) * blockDim.x) {
    double is = 1.0 / sqrt(static_cast<double>(var[c]) + eps);
    invstd[c] = static_cast<float>(is);
    if (mean_out) mean_out[c] = mean[c];
    coef[c] = static_cast<float>((gamma ? gamma[c] : 1.0) * is);
    coef[C + c] = 0.f;
    coef[2 * C + c] = beta ? beta[c] : 0.f;
    coef[3 * C + c] = mean[c];
  }
}

struct Args {
  int device;
  int64_t R, C;
};

Args check(const char* op, const Tensor& x, std::initializer_list<const Tensor*> per_channel) {
  std::vector<const Tensor*> all = {&x};
  all.insert(all.end(), per_channel.begin(), per_channel.end());
  int device = -1;
  for (const Tensor* t : all) {
    if (!t->defined()) continue;
    int d = same_device(op, {&x, t});
    device = d;
  }
  KILN_CHECK(x.dim() >= 2, op, ": x must be (N, C) or (N, H, W, C), got ", x.str());
  int64_t C = x.size(-1);
  for (const Tensor* t : per_channel)
    if (t->defined())
      KILN_CHECK(t->dim() == 1 && t->size(0) == C, op, ": per-channel tensor ", t->str(), " must be (", C, ") for x ",
                 x.str());
  return {device, C > 0 ? x.numel() / C : 0, C};
}

void check_running(const char* op, const Tensor& t) {
  if (t.defined())
    KILN_CHECK(t.dtype() == DType::f32 && t.is_contiguous(), op, ": running statistics must be packed f32, got ",
               t.str());
}

const float* fptr(const Tensor& t) { return t.defined() ? static_cast<const float*>(t.raw_data()) : nullptr; }
float* mfptr(const Tensor& t) { return t.defined() ? static_cast<float*>(t.raw_data()) : nullptr; }

template <bool kBackward>
void launch_channel(int device, DType dt, const Tensor& x, const Tensor& dy, const Tensor& out, const Tensor& coef,
                    int64_t C) {
  int64_t n = x.numel();
  if (n == 0) return;
  constexpr int kThreads = 256;
  int grid = grid_for(device, n, kThreads);
  cudaStream_t s = stream_of(device);
  dispatch_float(dt, "batch_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = static_cast<const T*>(x.raw_data());
    const T* pd = kBackward ? static_cast<const T*>(dy.raw_data()) : nullptr;
    T* po = static_cast<T*>(out.raw_data());
    const float* pc = fptr(coef);
    if (fits_u32(n))
      channel_kernel<T, uint32_t, kBackward><<<grid, kThreads, 0, s>>>(px, pd, po, pc, uint32_t(n), uint32_t(C));
    else
      channel_kernel<T, int64_t, kBackward><<<grid, kThreads, 0, s>>>(px, pd, po, pc, n, C);
  });
  CUDA_CHECK_LAUNCH();
}

// param_grads: dgamma and dbeta also without gamma (the kernel table's contract).
BatchNormGrads backward_impl(const char* op, const Tensor& gy0, const Tensor& x0, const Tensor& gamma0,
                             const Tensor& mean, const Tensor& invstd, const Args& a, bool training,
                             bool param_grads = false) {
  same_device(op, {&gy0, &x0});
  KILN_CHECK(gy0.shape() == x0.shape() && gy0.dtype() == x0.dtype(), op, ": gradient ", gy0.str(), " for x ",
             x0.str());
  Tensor x = packed(x0), gy = packed(gy0);
  Tensor gamma = gamma0.defined() ? packed_f32(gamma0) : Tensor();
  BatchNormGrads out;
  out.dx = empty_on(x.shape(), x.dtype(), x);
  if (gamma.defined() || param_grads) {
    out.dgamma = Tensor::empty({a.C}, DType::f32, x.device());
    out.dbeta = Tensor::empty({a.C}, DType::f32, x.device());
  }
  if (a.C == 0) return out;
  Tensor coef = Tensor::empty({4 * a.C}, DType::f32, x.device());
  DeviceGuard g(a.device);
  StoreBackward store{fptr(mean), fptr(invstd), fptr(gamma), mfptr(out.dgamma), mfptr(out.dbeta), mfptr(coef),
                      a.R,        a.C,          training};
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    reduce_arb<2, SumCombine>(a.device, 1, a.R, a.C,
                              LoadBackward<T>{static_cast<const T*>(gy.raw_data()), static_cast<const T*>(x.raw_data()),
                                              fptr(mean), a.C},
                              store);
  });
  launch_channel<true>(a.device, x.dtype(), x, gy, out.dx, coef, a.C);
  return out;
}

}  // namespace

Tensor batch_norm_forward_train(const Tensor& x0, const Tensor& gamma0, const Tensor& beta0,
                                const Tensor& running_mean, const Tensor& running_var, double momentum, double eps,
                                Tensor* save_mean, Tensor* save_invstd) {
  const char* op = "batch_norm";
  Args a = check(op, x0, {&gamma0, &beta0, &running_mean, &running_var});
  check_running(op, running_mean);
  check_running(op, running_var);
  KILN_CHECK(running_mean.defined() == running_var.defined(), op, ": give both running statistics or neither");
  KILN_CHECK(a.R > 1, op, ": training needs more than one value per channel, got x ", x0.str());
  KILN_CHECK(save_mean && save_invstd, op, ": save_mean and save_invstd are required in training");
  Tensor x = packed(x0);
  Tensor gamma = gamma0.defined() ? packed_f32(gamma0) : Tensor();
  Tensor beta = beta0.defined() ? packed_f32(beta0) : Tensor();
  *save_mean = Tensor::empty({a.C}, DType::f32, x.device());
  *save_invstd = Tensor::empty({a.C}, DType::f32, x.device());
  Tensor y = empty_on(x.shape(), x.dtype(), x);
  Tensor coef = Tensor::empty({4 * a.C}, DType::f32, x.device());
  DeviceGuard g(a.device);
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = static_cast<const T*>(x.raw_data());
    StoreStats<T> store{px,
                        a.R,
                        eps,
                        momentum,
                        fptr(gamma),
                        fptr(beta),
                        mfptr(*save_mean),
                        mfptr(*save_invstd),
                        mfptr(running_mean),
                        mfptr(running_var),
                        mfptr(coef),
                        a.C};
    reduce_arb<2, SumCombine>(a.device, 1, a.R, a.C, LoadShifted<T>{px, a.C}, store);
  });
  launch_channel<false>(a.device, x.dtype(), x, Tensor(), y, coef, a.C);
  return y;
}

namespace {
// save_mean/save_invstd (if not null) receive the running mean and 1/sqrt(running_var + eps) (C, f32).
Tensor forward_eval(const Tensor& x0, const Tensor& gamma0, const Tensor& beta0, const Tensor& running_mean,
                    const Tensor& running_var, double eps, Tensor* save_mean, Tensor* save_invstd) {
  const char* op = "batch_norm (eval)";
  Args a = check(op, x0, {&gamma0, &beta0, &running_mean, &running_var});
  KILN_CHECK(running_mean.defined() && running_var.defined(), op, ": eval needs running_mean and running_var");
  Tensor x = packed(x0);
  Tensor gamma = gamma0.defined() ? packed_f32(gamma0) : Tensor();
  Tensor beta = beta0.defined() ? packed_f32(beta0) : Tensor();
  Tensor rm = packed_f32(running_mean), rv = packed_f32(running_var);
  Tensor y = empty_on(x.shape(), x.dtype(), x);
  Tensor invstd = Tensor::empty({a.C}, DType::f32, x.device());
  Tensor mean_out = save_mean ? Tensor::empty({a.C}, DType::f32, x.device()) : Tensor();
  if (save_mean) *save_mean = mean_out;
  if (save_invstd) *save_invstd = invstd;
  if (a.C == 0) return y;
  Tensor coef = Tensor::empty({4 * a.C}, DType::f32, x.device());
  DeviceGuard g(a.device);
  eval_coef_kernel<<<grid_for(a.device, a.C, 256), 256, 0, stream_of(a.device)>>>(
      fptr(rm), fptr(rv), fptr(gamma), fptr(beta), eps, a.C, mfptr(invstd), mfptr(coef), mfptr(mean_out));
  CUDA_CHECK_LAUNCH();
  launch_channel<false>(a.device, x.dtype(), x, Tensor(), y, coef, a.C);
  return y;
}
}  // namespace

Tensor batch_norm_forward_eval(const Tensor& x0, const Tensor& gamma0, const Tensor& beta0, const Tensor& running_mean,
                               const Tensor& running_var, double eps) {
  return forward_eval(x0, gamma0, beta0, running_mean, running_var, eps, nullptr, nullptr);
}

BatchNormGrads batch_norm_backward_train(const Tensor& grad_out, const Tensor& x, const Tensor& gamma,
                                         const Tensor& save_mean, const Tensor& save_invstd) {
  const char* op = "batch_norm_backward";
  Args a = check(op, x, {&gamma, &save_mean, &save_invstd});
  KILN_CHECK(save_mean.defined() && save_invstd.defined(), op, ": save_mean and save_invstd are required");
  return backward_impl(op, grad_out, x, gamma, packed_f32(save_mean), packed_f32(save_invstd), a, true);
}

BatchNormGrads batch_norm_backward_eval(const Tensor& grad_out, const Tensor& x, const Tensor& gamma,
                                        const Tensor& running_mean, const Tensor& running_var, double eps) {
  const char* op = "batch_norm_backward (eval)";
  Args a = check(op, x, {&gamma, &running_mean, &running_var});
  KILN_CHECK(running_mean.defined() && running_var.defined(), op, ": eval needs running_mean and running_var");
  Tensor rm = packed_f32(running_mean), rv = packed_f32(running_var);
  Tensor coef = Tensor::empty({4 * a.C}, DType::f32, x.device());
  Tensor invstd = Tensor::empty({a.C}, DType::f32, x.device());
  if (a.C > 0) {
    DeviceGuard g(a.device);
    eval_coef_kernel<<<grid_for(a.device, a.C, 256), 256, 0, stream_of(a.device)>>>(
        fptr(rm), fptr(rv), nullptr, nullptr, eps, a.C, mfptr(invstd), mfptr(coef), nullptr);
    CUDA_CHECK_LAUNCH();
  }
  return backward_impl(op, grad_out, x, gamma, rm, invstd, a, false);
}

// --- the kernel table's entries (core/kernels.h, listed in core/cuda/kernels_cuda.cu) ---------------

Tensor batch_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                          const Tensor& running_var, bool training, double momentum, double eps, Tensor* save_mean,
                          Tensor* save_invstd) {
  if (!training) return forward_eval(x, gamma, beta, running_mean, running_var, eps, save_mean, save_invstd);
  Tensor mean, invstd;  // required by the training kernel even when the caller keeps none
  Tensor y = batch_norm_forward_train(x, gamma, beta, running_mean, running_var, momentum, eps, &mean, &invstd);
  if (save_mean) *save_mean = mean;
  if (save_invstd) *save_invstd = invstd;
  return y;
}

// dgamma and dbeta always (f32), gamma or not; grad_out of any floating dtype (brought to x's); the
// saved statistics are the forward's (train and eval alike).
kiln::BatchNormGradients batch_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& gamma,
                                             const Tensor& save_mean, const Tensor& save_invstd, bool training,
                                             bool /*need_dx: dx costs one pass; always computed*/) {
  const char* op = training ? "batch_norm_backward" : "batch_norm_backward (eval)";
  Args a = check(op, x, {&gamma, &save_mean, &save_invstd});
  KILN_CHECK(save_mean.defined() && save_invstd.defined(), op, ": save_mean and save_invstd are required");
  Tensor gy = grad_out.dtype() == x.dtype() ? grad_out : grad_out.to(x.dtype());
  BatchNormGrads g =
      backward_impl(op, gy, x, gamma, packed_f32(save_mean), packed_f32(save_invstd), a, training, true);
  return {g.dx, g.dgamma, g.dbeta};
}

}  // namespace kiln::cuda
