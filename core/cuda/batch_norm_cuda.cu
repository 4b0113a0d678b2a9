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
// The kernels of core/ops/batch_norm.h's slots, batch_norm_forward and batch_norm_backward, are at the
// end of this file: train and eval in one kernel each, the statistics the forward used saved for the backward.
//
// cuDNN's batch norm for training f32, f16 and bf16 NHWC activations (PyTorch uses it for f32/f16 and
// its own kernels for bf16; kiln asks cuDNN for bf16 too and runs the kernels above where cuDNN
// refuses; eval stays on the kernels above): cudnnBatchNormalization{ForwardTraining,Backward}Ex
// in CUDNN_BATCHNORM_SPATIAL_PERSISTENT mode, whose NHWC kernels read the activations fewer times than
// the two-pass kernels above. The first GPU run (H200, ResNet-50 batch 256) had kiln at 0.86x PyTorch in
// fp16 and 0.91x in fp32 but 1.00x in bf16, where PyTorch runs its own kernels: the batch norm is where
// the two differ. Same semantics (running variance unbiased, eps inside the square root, momentum as
// the exponential average factor); the forward's reserve space and eps travel to the backward in the
// slot's opaque `saved` handle. Taken when x is (N, H, W, C) of f32/f16/bf16, eps >= CUDNN_BN_MIN_EPSILON,
// N <= 880801 and every count fits an int (PyTorch's conditions), and set_batch_norm_cudnn(true)
// (default; KILN_CUDNN_BATCH_NORM=0 in the environment turns it off, for A/B timings). A call cuDNN
// refuses (a failed query, or NOT_SUPPORTED/BAD_PARAM from the call) runs on the kernels above (the
// queries come first and the call checks before it runs, so nothing has been written; the running
// statistics are updated once).
// Tests: tests/gpu/batch_norm_test.cpp, tests/gpu/ops_dispatch_test.cpp.
#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <tuple>

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

// The training forward's arguments (both kernels): shapes, devices, and the running statistics.
Args check_train(const char* op, const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                 const Tensor& running_var) {
  Args a = check(op, x, {&gamma, &beta, &running_mean, &running_var});
  check_running(op, running_mean);
  check_running(op, running_var);
  KILN_CHECK(running_mean.defined() == running_var.defined(), op, ": give both running statistics or neither");
  return a;
}

// The backward's gradient: x's shape and dtype, on x's device (both kernels).
void check_grad(const char* op, const Tensor& gy, const Tensor& x) {
  same_device(op, {&gy, &x});
  KILN_CHECK(gy.shape() == x.shape() && gy.dtype() == x.dtype(), op, ": gradient ", gy.str(), " for x ", x.str());
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

// param_grads: dgamma and dbeta also without gamma (the slot's contract, core/ops/batch_norm.h).
BatchNormGrads backward_impl(const char* op, const Tensor& gy0, const Tensor& x0, const Tensor& gamma0,
                             const Tensor& mean, const Tensor& invstd, const Args& a, bool training,
                             bool param_grads = false) {
  check_grad(op, gy0, x0);
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
  Args a = check_train(op, x0, gamma0, beta0, running_mean, running_var);
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

// --- cuDNN's batch norm (training, f32/f16/bf16 NHWC) ----------------------------------------------------
namespace {

std::atomic<bool> g_bn_cudnn{env_switch_on("KILN_CUDNN_BATCH_NORM")};

constexpr cudnnBatchNormMode_t kBnMode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;

// What the backward needs besides x, gamma and the saved statistics.
struct CudnnBnSaved {
  Tensor reserve;  // u8, may be empty
  double eps = 0;
  cudnnBatchNormOps_t ops = CUDNN_BATCHNORM_OPS_BN;  // BN, or the fused BN_ACTIVATION / BN_ADD_ACTIVATION
  Tensor beta;  // f32 (C): the fused ops' backward reads it
};

// cuDNN refusing a case rather than failing: NOT_SUPPORTED or BAD_PARAM, including cuDNN 9's finer
// codes within those categories (NOT_SUPPORTED_DATA_TYPE, BAD_PARAM_MISALIGNED_POINTER, ...). A refused
// query or call has written nothing; the caller runs kiln's kernels.
bool refused(cudnnStatus_t st) {
  const int cat = CUDNN_STATUS_CATEGORY(st);
  return cat == CUDNN_STATUS_NOT_SUPPORTED || cat == CUDNN_STATUS_BAD_PARAM;
}

// Cases cuDNN refused once (dtype, ops, N, H, W, C), forward or backward: later calls go straight to
// kiln's kernels instead of repeating the descriptor set-up and the failing query every step.
using BnCase = std::tuple<int, int, int64_t, int64_t, int64_t, int64_t>;
std::mutex g_refused_mu;
std::set<BnCase> g_refused;

BnCase case_of(const Tensor& x, cudnnBatchNormOps_t ops) {
  return {static_cast<int>(x.dtype()), static_cast<int>(ops), x.size(0), x.size(1), x.size(2), x.size(3)};
}
bool known_refused(const BnCase& c) {
  std::lock_guard<std::mutex> lk(g_refused_mu);
  return g_refused.count(c) > 0;
}
void remember_refused(const BnCase& c) {
  std::lock_guard<std::mutex> lk(g_refused_mu);
  g_refused.insert(c);
}

// ReLU for cuDNN's fused batch-norm ops; NaN propagates, as kiln's relu. `status` is the set-up's.
struct ReluDescriptor {
  cudnnActivationDescriptor_t d = nullptr;
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  ReluDescriptor() {
    status = cudnnCreateActivationDescriptor(&d);
    if (status == CUDNN_STATUS_SUCCESS)
      status = cudnnSetActivationDescriptor(d, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0);
  }
  ~ReluDescriptor() {
    if (d) cudnnDestroyActivationDescriptor(d);
  }
  ReluDescriptor(const ReluDescriptor&) = delete;
  ReluDescriptor& operator=(const ReluDescriptor&) = delete;
};

// The descriptors of one call: x/y/dy (N, C, H, W) in NHWC order, and the (1, C, 1, 1) f32 statistics.
// The set-up does not throw: `status` says whether it worked (a version that has no bf16 batch norm
// may refuse the bf16 descriptor here), and the destructor releases what was created.
struct BnDescriptors {
  cudnnTensorDescriptor_t x = nullptr, stats = nullptr;
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  BnDescriptors(const Tensor& x_, DType t) {
    const int n = static_cast<int>(x_.size(0)), h = static_cast<int>(x_.size(1)), w = static_cast<int>(x_.size(2)),
              c = static_cast<int>(x_.size(3));
    const cudnnDataType_t dt =
        t == DType::f16 ? CUDNN_DATA_HALF : t == DType::bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    status = cudnnCreateTensorDescriptor(&x);
    if (status == CUDNN_STATUS_SUCCESS) status = cudnnCreateTensorDescriptor(&stats);
    if (status == CUDNN_STATUS_SUCCESS) status = cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NHWC, dt, n, c, h, w);
    if (status == CUDNN_STATUS_SUCCESS) status = cudnnDeriveBNTensorDescriptor(stats, x, kBnMode);
  }
  ~BnDescriptors() {
    if (x) cudnnDestroyTensorDescriptor(x);
    if (stats) cudnnDestroyTensorDescriptor(stats);
  }
  BnDescriptors(const BnDescriptors&) = delete;
  BnDescriptors& operator=(const BnDescriptors&) = delete;
};

// Whether a status lets the call go on: success -> true; false when the caller should fall back (the
// case is remembered); otherwise throws. Set-up and queries (`query`) write nothing, so any failure of
// theirs falls back; a batch-norm call falls back only on a refusal, which cuDNN returns before it
// writes anything; any other failure of a call throws.
bool proceed(cudnnStatus_t st, const BnCase& c, const char* what, bool query = true) {
  if (st == CUDNN_STATUS_SUCCESS) return true;
  if (query || refused(st)) {
    remember_refused(c);
    return false;
  }
  KILN_FAIL("cuDNN batch norm: ", what, " failed: ", cudnnGetErrorString(st), " (status ", static_cast<int>(st), ")");
}

bool cudnn_bn_applies(const Tensor& x, double eps) {
  if (!g_bn_cudnn.load(std::memory_order_relaxed)) return false;
  if (x.dtype() != DType::f32 && x.dtype() != DType::f16 && x.dtype() != DType::bf16) return false;
  if (x.dim() != 4 || eps < CUDNN_BN_MIN_EPSILON) return false;
  // 0 < numel < INT_MAX also keeps every dim within cuDNN's int descriptors.
  if (x.numel() == 0 || x.numel() >= INT_MAX || x.size(0) > 880801) return false;
  return x.numel() / x.size(3) > 1;  // training needs more than one value per channel: our error message
}

// A workspace or reserve of at least `n` bytes, never empty: cuDNN runs its fused NHWC kernels only
// with a non-null workspace and reserve, and documents a null workspace of size 0 as "exactly like the
// non-extended function" (which has no activation). 256 bytes keep the buffer aligned and cost nothing.
Tensor bytes_on(size_t n, int device) {
  return Tensor::empty({static_cast<int64_t>(std::max<size_t>(n, 256))}, DType::u8, Device::cuda(device));
}
size_t bytes_of(const Tensor& t) { return t.defined() ? static_cast<size_t>(t.numel()) : 0; }
void* ptr_or_null(const Tensor& t) { return t.defined() && t.numel() > 0 ? t.raw_data() : nullptr; }

// Returns an undefined tensor when cuDNN does not support the case (the caller runs our kernels).
// ops: CUDNN_BATCHNORM_OPS_BN, or the fused BN_ACTIVATION (relu) / BN_ADD_ACTIVATION (relu after
// adding `residual`, of x's shape and dtype).
Tensor cudnn_forward_train(const Tensor& x0, const Tensor& gamma0, const Tensor& beta0, const Tensor& running_mean,
                           const Tensor& running_var, double momentum, double eps, Tensor* save_mean,
                           Tensor* save_invstd, std::shared_ptr<void>* saved,
                           cudnnBatchNormOps_t ops = CUDNN_BATCHNORM_OPS_BN, const Tensor& residual = Tensor()) {
  const char* op = ops == CUDNN_BATCHNORM_OPS_BN ? "batch_norm" : "batch_norm_relu";
  Args a = check_train(op, x0, gamma0, beta0, running_mean, running_var);
  const BnCase bn_case = case_of(x0, ops);
  if (known_refused(bn_case)) return Tensor();
  const DType t = x0.dtype();
  Tensor x = packed(x0);
  Tensor gamma = gamma0.defined() ? packed_f32(gamma0) : Tensor::full({a.C}, 1.0, DType::f32, x.device());
  Tensor beta = beta0.defined() ? packed_f32(beta0) : Tensor::zeros({a.C}, DType::f32, x.device());
  Tensor mean = Tensor::empty({a.C}, DType::f32, x.device()), invstd = Tensor::empty({a.C}, DType::f32, x.device());
  Tensor y = empty_on(x.shape(), t, x);
  DeviceGuard g(a.device);
  cudnnHandle_t h = cudnn_handle(a.device);
  BnDescriptors d(x, t);
  const bool act = ops != CUDNN_BATCHNORM_OPS_BN, add = ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
  ReluDescriptor relu;
  if (!proceed(d.status, bn_case, "tensor descriptors") || !proceed(relu.status, bn_case, "relu descriptor"))
    return Tensor();
  cudnnActivationDescriptor_t act_d = act ? relu.d : nullptr;
  cudnnTensorDescriptor_t z_d = add ? d.x : nullptr, y_d = act ? d.x : nullptr, dz_d = add ? d.x : nullptr;
  Tensor z = add ? packed(residual) : Tensor();
  size_t ws_bytes = 0, reserve_bytes = 0, bwd_bytes = 0;
  // The queries write nothing. Any of them refused (bf16, or a fused op its kernels lack, come back
  // NOT_SUPPORTED or BAD_PARAM depending on the version): the case is ours to run. The backward's is
  // asked here too, so that a case cuDNN would take forward but not backward runs on our kernels both ways.
  if (!proceed(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(h, kBnMode, ops, d.x, z_d, d.x, d.stats, act_d,
                                                                         &ws_bytes),
               bn_case, "forward workspace query") ||
      !proceed(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(h, kBnMode, ops, act_d, d.x, &reserve_bytes),
               bn_case, "reserve space query") ||
      !proceed(cudnnGetBatchNormalizationBackwardExWorkspaceSize(h, kBnMode, ops, d.x, y_d, d.x, dz_d, d.x, d.stats,
                                                                 act_d, &bwd_bytes),
               bn_case, "backward workspace query"))
    return Tensor();
  Tensor ws = bytes_on(ws_bytes, a.device);
  auto keep = std::make_shared<CudnnBnSaved>();
  keep->reserve = bytes_on(reserve_bytes, a.device);
  keep->eps = eps;
  keep->ops = ops;
  if (act) keep->beta = beta;
  const float one = 1.f, zero = 0.f;
  cudnnStatus_t st = cudnnBatchNormalizationForwardTrainingEx(
      h, kBnMode, ops, &one, &zero, d.x, x.raw_data(), z_d, add ? z.raw_data() : nullptr, d.x, y.raw_data(), d.stats,
      gamma.raw_data(), beta.raw_data(), momentum, ptr_or_null(running_mean), ptr_or_null(running_var), eps,
      mean.raw_data(), invstd.raw_data(), act_d, ws.raw_data(), bytes_of(ws), keep->reserve.raw_data(),
      bytes_of(keep->reserve));
  // Refused before running (its parameter checks come first): nothing was written.
  if (!proceed(st, bn_case, "cudnnBatchNormalizationForwardTrainingEx", false)) return Tensor();
  if (save_mean) *save_mean = mean;
  if (save_invstd) *save_invstd = invstd;
  if (saved) *saved = keep;
  return y;
}

// keep.ops BN: y0 unused. The fused ops: y0 is the forward's output (relu's mask); with a residual
// (BN_ADD_ACTIVATION) *dresidual receives its gradient. Returns false, having written nothing, when
// cuDNN refuses the case (the forward asked the backward's query already, so this is not expected):
// the caller runs kiln's kernels on the same saved statistics.
bool cudnn_backward_train(const Tensor& gy0, const Tensor& x0, const Tensor& gamma0, const Tensor& mean,
                          const Tensor& invstd, const CudnnBnSaved& keep, BatchNormGrads& out,
                          const Tensor& y0 = Tensor(), Tensor* dresidual = nullptr) {
  const char* op = keep.ops == CUDNN_BATCHNORM_OPS_BN ? "batch_norm_backward" : "batch_norm_relu_backward";
  Args a = check(op, x0, {&gamma0, &mean, &invstd});
  check_grad(op, gy0, x0);
  const DType t = x0.dtype();
  Tensor x = packed(x0), gy = packed(gy0);
  Tensor gamma = gamma0.defined() ? packed_f32(gamma0) : Tensor::full({a.C}, 1.0, DType::f32, x.device());
  Tensor m = packed_f32(mean), is = packed_f32(invstd);
  const BnCase bn_case = case_of(x0, keep.ops);
  out.dx = empty_on(x.shape(), t, x);
  out.dgamma = Tensor::empty({a.C}, DType::f32, x.device());
  out.dbeta = Tensor::empty({a.C}, DType::f32, x.device());
  DeviceGuard g(a.device);
  cudnnHandle_t h = cudnn_handle(a.device);
  BnDescriptors d(x, t);
  const bool act = keep.ops != CUDNN_BATCHNORM_OPS_BN, add = keep.ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
  KILN_CHECK(!act || (y0.defined() && y0.shape() == x0.shape() && y0.dtype() == t && keep.beta.defined()), op,
             ": the fused backward needs the forward's output y ", y0.str(), " of x's shape and dtype ", x0.str());
  ReluDescriptor relu;
  if (!proceed(d.status, bn_case, "tensor descriptors") || !proceed(relu.status, bn_case, "relu descriptor"))
    return false;
  cudnnActivationDescriptor_t act_d = act ? relu.d : nullptr;
  cudnnTensorDescriptor_t y_d = act ? d.x : nullptr, dz_d = add ? d.x : nullptr;
  Tensor y = act ? packed(y0) : Tensor();
  Tensor dz = add ? empty_on(x.shape(), t, x) : Tensor();
  size_t ws_bytes = 0;
  if (!proceed(cudnnGetBatchNormalizationBackwardExWorkspaceSize(h, kBnMode, keep.ops, d.x, y_d, d.x, dz_d, d.x,
                                                                 d.stats, act_d, &ws_bytes),
               bn_case, "backward workspace query"))
    return false;
  Tensor ws = bytes_on(ws_bytes, a.device);
  const float one = 1.f, zero = 0.f;
  const cudnnStatus_t st = cudnnBatchNormalizationBackwardEx(
      h, kBnMode, keep.ops, &one, &zero, &one, &zero, d.x, x.raw_data(), y_d, act ? y.raw_data() : nullptr, d.x,
      gy.raw_data(), dz_d, add ? dz.raw_data() : nullptr, d.x, out.dx.raw_data(), d.stats, gamma.raw_data(),
      act ? keep.beta.raw_data() : nullptr, out.dgamma.raw_data(), out.dbeta.raw_data(), keep.eps, m.raw_data(),
      is.raw_data(), act_d, ws.raw_data(), bytes_of(ws), ptr_or_null(keep.reserve), bytes_of(keep.reserve));
  if (!proceed(st, bn_case, "cudnnBatchNormalizationBackwardEx", false)) return false;
  if (dresidual) *dresidual = dz;
  return true;
}

}  // namespace

void set_batch_norm_cudnn(bool on) { g_bn_cudnn.store(on); }
bool batch_norm_cudnn() { return g_bn_cudnn.load(); }
bool batch_norm_saved_is_fused(const std::shared_ptr<void>& saved) {
  return saved && static_cast<const CudnnBnSaved*>(saved.get())->ops != CUDNN_BATCHNORM_OPS_BN;
}

// --- the kernels of core/ops/batch_norm.h's slots (registered in core/cuda/kernels_cuda.cu) ---------

Tensor batch_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                          const Tensor& running_var, bool training, double momentum, double eps, Tensor* save_mean,
                          Tensor* save_invstd, std::shared_ptr<void>* saved) {
  if (saved) saved->reset();
  if (!training) return forward_eval(x, gamma, beta, running_mean, running_var, eps, save_mean, save_invstd);
  if (cudnn_bn_applies(x, eps)) {
    Tensor y = cudnn_forward_train(x, gamma, beta, running_mean, running_var, momentum, eps, save_mean, save_invstd,
                                   saved);
    if (y.defined()) return y;
  }
  Tensor mean, invstd;  // required by the training kernel even when the caller keeps none
  Tensor y = batch_norm_forward_train(x, gamma, beta, running_mean, running_var, momentum, eps, &mean, &invstd);
  if (save_mean) *save_mean = mean;
  if (save_invstd) *save_invstd = invstd;
  return y;
}

// dgamma and dbeta always (f32), gamma or not; grad_out of any floating dtype (brought to x's); the
// saved statistics are the forward's (train and eval alike).
kiln::BatchNormGradients batch_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& gamma,
                                             const Tensor& save_mean, const Tensor& save_invstd,
                                             const std::shared_ptr<void>& saved, bool training,
                                             bool /*need_dx: dx costs one pass; always computed*/) {
  const char* op = training ? "batch_norm_backward" : "batch_norm_backward (eval)";
  Args a = check(op, x, {&gamma, &save_mean, &save_invstd});
  KILN_CHECK(save_mean.defined() && save_invstd.defined(), op, ": save_mean and save_invstd are required");
  Tensor gy = grad_out.dtype() == x.dtype() ? grad_out : grad_out.to(x.dtype());
  if (training && saved) {  // the forward ran on cuDNN: so does the backward, with its reserve space
    const auto& keep = *static_cast<const CudnnBnSaved*>(saved.get());
    KILN_CHECK(keep.ops == CUDNN_BATCHNORM_OPS_BN, op, ": the forward was batch_norm_relu's fused one; its backward is "
               "batch_norm_relu_backward");
    BatchNormGrads g;
    if (cudnn_backward_train(gy, x, gamma, save_mean, save_invstd, keep, g)) return {g.dx, g.dgamma, g.dbeta, Tensor()};
    // Refused: kiln's kernels read the same saved mean and 1/sqrt(var + eps) (cuDNN's convention).
  }
  BatchNormGrads g =
      backward_impl(op, gy, x, gamma, packed_f32(save_mean), packed_f32(save_invstd), a, training, true);
  return {g.dx, g.dgamma, g.dbeta, Tensor()};
}

// core/cuda/elementwise_cuda.cu (the binary and unary slots' kernels)
Tensor elementwise_binary(ElementwiseBinary op, const Tensor& a, const Tensor& b);
Tensor elementwise_unary(ElementwiseUnary op, const Tensor& a);

// relu(batch norm + residual): in training on cuDNN's fused BN_ACTIVATION / BN_ADD_ACTIVATION where
// cuDNN takes the case (its NHWC persistent kernels: f16, and what else its query accepts), else the
// batch norm above followed by the add and relu kernels.
Tensor batch_norm_relu_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                               const Tensor& running_var, bool training, double momentum, double eps,
                               const Tensor& residual, Tensor* save_mean, Tensor* save_invstd,
                               std::shared_ptr<void>* saved) {
  // residual: x's shape and dtype (checked by the op, ops::batch_norm_relu)
  if (saved) saved->reset();
  if (training && cudnn_bn_applies(x, eps)) {
    const cudnnBatchNormOps_t ops =
        residual.defined() ? CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION : CUDNN_BATCHNORM_OPS_BN_ACTIVATION;
    Tensor y = cudnn_forward_train(x, gamma, beta, running_mean, running_var, momentum, eps, save_mean, save_invstd,
                                   saved, ops, residual);
    if (y.defined()) return y;
  }
  Tensor y = batch_norm_forward(x, gamma, beta, running_mean, running_var, training, momentum, eps, save_mean,
                                save_invstd, saved);
  if (residual.defined()) y = elementwise_binary(ElementwiseBinary::add, y, residual);
  return elementwise_unary(ElementwiseUnary::relu, y);
}

kiln::BatchNormGradients batch_norm_relu_backward(const Tensor& grad_out, const Tensor& y, const Tensor& x,
                                                  const Tensor& gamma, const Tensor& /*beta: kept by the forward*/,
                                                  const Tensor& save_mean, const Tensor& save_invstd,
                                                  const std::shared_ptr<void>& saved, bool training, bool need_dx,
                                                  bool has_residual) {
  const auto* keep = saved ? static_cast<const CudnnBnSaved*>(saved.get()) : nullptr;
  if (training && keep && keep->ops != CUDNN_BATCHNORM_OPS_BN) {  // the fused forward: cuDNN's fused backward
    KILN_CHECK(has_residual == (keep->ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION),
               "batch_norm_relu_backward: has_residual does not match the forward's fused op");
    Tensor gy = grad_out.dtype() == x.dtype() ? grad_out : grad_out.to(x.dtype());
    Tensor dz;
    BatchNormGrads g;
    if (cudnn_backward_train(gy, x, gamma, save_mean, save_invstd, *keep, g, y, &dz)) return {g.dx, g.dgamma, g.dbeta, dz};
  }
  // kiln's kernels: relu's backward on the fused output, then batch norm's (a refused fused backward
  // too: its saved statistics are batch norm's, the reserve is not needed).
  Tensor g = elementwise_binary(ElementwiseBinary::relu_backward, grad_out, y);
  const bool fused_saved = keep && keep->ops != CUDNN_BATCHNORM_OPS_BN;
  kiln::BatchNormGradients out =
      batch_norm_backward(g, x, gamma, save_mean, save_invstd, fused_saved ? nullptr : saved, training, need_dx);
  if (has_residual) out.dresidual = g;
  return out;
}

}  // namespace kiln::cuda
