// Softmax cross-entropy (with label smoothing) and row softmax on the GPU, one block per row,
// f32 math whatever the logits' dtype. Per row i with lse = max + log(sum exp(x - max)):
//   loss_i = lse - (1-e) * x[y_i] - (e/K) * sum_j x_j           (target (1-e)*onehot + e/K)
//   dloss/dx_ij = g/N * (exp(x_ij - lse) - (1-e)*[j == y_i] - e/K)
// With class weights w (PyTorch's weighted mean, S = sum_i w[y_i], W = sum_k w_k):
//   loss_i = (1-e) w_y (lse - x[y_i]) + (e/K) (W lse - sum_j w_j x_j),  loss = sum_i loss_i / S
//   dloss/dx_ij = g/S * ((1-e) w_y (p_ij - [j == y_i]) + (e/K) (W p_ij - w_j)), 0 where S = 0
// Probability targets (soft_cross_entropy, MixUp/CutMix): a_ij = w_j ((1-e) t_ij + e/K),
//   loss_i = sum_j a_ij (lse - x_ij), loss = sum_i loss_i / N,  dloss/dx_ij = g/N (p_ij sum_k a_ik - a_ij)
// The batch mean goes through the deterministic reduction (no atomics). A label outside [0, K)
// gives a NaN loss for that row (the device cannot throw; the NaN reaches all_finite and the
// loss scaler). Tests: tests/gpu/loss_test.cpp.
#include "core/cuda/cuda_ops.h"
#include "core/cuda/kernel_util.cuh"
#include "core/cuda/reduce_util.cuh"

namespace kiln::cuda {
namespace {

// Row statistics: max, log-sum-exp, and the sum of the row (for smoothing). All threads get them.
struct RowStats {
  float lse, sum, wtotal;  // wtotal = sum_j w_j (with weights and need_sum)
};

// w (nullable): class weights; then sum = sum_j w_j x_j, and wtotal = sum_j w_j (summed on the
// device: reading the weights on the host would block every training step).
template <typename T>
__device__ RowStats row_stats(const T* row, int64_t K, bool need_sum, const float* w = nullptr) {
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < K; j += blockDim.x) m = MaxCombine::op(m, to_float(row[j]));
  m = block_combine<MaxCombine>(m);
  float se = 0.f, sx = 0.f, sw = 0.f;
  for (int64_t j = threadIdx.x; j < K; j += blockDim.x) {
    float v = to_float(row[j]);
    se += expf(v - m);
    sx += w ? w[j] * v : v;
    if (w) sw += w[j];
  }
  se = block_combine<SumCombine>(se);
  if (need_sum) sx = block_combine<SumCombine>(sx);
  if (need_sum && w) sw = block_combine<SumCombine>(sw);
  // NOTE: a row of all -inf has m = -inf: lse is NaN, as in PyTorch.
  return {m + logf(se), sx, sw};
}

// w (nullable): class weights; row_w[i] = w[y_i] (weighted only).
template <typename T, typename L>
__global__ void ce_forward_kernel(const T* logits, const L* labels, int64_t N, int64_t K, float smoothing,
                                  const float* w, float* row_loss, float* row_w) {
  for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {
    const T* row = logits + i * K;
    RowStats st = row_stats(row, K, smoothing != 0.f, w);
    if (threadIdx.x == 0) {
      int64_t y = static_cast<int64_t>(labels[i]);
      float loss = NAN, wy = NAN;
      if (y >= 0 && y < K) {
        wy = w ? w[y] : 1.f;
        loss = (w ? wy * (1.f - smoothing) * (st.lse - to_float(row[y]))
                  : st.lse - (1.f - smoothing) * to_float(row[y]));
        if (smoothing != 0.f)
          loss += w ? smoothing / static_cast<float>(K) * (st.wtotal * st.lse - st.sum)
                    : -smoothing / static_cast<float>(K) * st.sum;
      }
      row_loss[i] = loss;
      if (row_w) row_w[i] = wy;
    }
  }
}

// weight_sum (nullable with w): the divisor S; unweighted the divisor is N.
template <typename T, typename L>
__global__ void ce_backward_kernel(const float* grad_loss, const T* logits, const L* labels, int64_t N, int64_t K,
                                   float smoothing, const float* w, const float* weight_sum,
                                   T* dlogits) {
  float div = w ? *weight_sum : static_cast<float>(N);
  float g = div > 0.f ? *grad_loss / div : 0.f;
  float off = smoothing / static_cast<float>(K);
  for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {
    const T* row = logits + i * K;
    RowStats st = row_stats(row, K, w && smoothing != 0.f, w);
    int64_t y = static_cast<int64_t>(labels[i]);
    bool valid = y >= 0 && y < K;
    float wy = w && valid ? w[y] : 1.f;
    for (int64_t j = threadIdx.x; j < K; j += blockDim.x) {
      float p = expf(to_float(row[j]) - st.lse);
      float d = NAN;
      if (valid && !w) d = g * (p - off - (j == y ? 1.f - smoothing : 0.f));
      else if (valid) d = g * ((1.f - smoothing) * wy * (p - (j == y ? 1.f : 0.f)) + off * (st.wtotal * p - w[j]));
      dlogits[i * K + j] = from_float<T>(d);
    }
  }
}

// Probability targets: a_j = w_j ((1-e) t_j + e/K) (w_j = 1 without weights).
__device__ inline float soft_weight(const float* t, const float* w, int64_t j, float e, float inv_k) {
  float a = (1.f - e) * t[j] + e * inv_k;
  return w ? w[j] * a : a;
}

template <typename T>
__global__ void soft_ce_forward_kernel(const T* logits, const float* targets, int64_t N, int64_t K, float e,
                                       const float* w, float* row_loss) {
  const float inv_k = 1.f / static_cast<float>(K);
  for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {
    const T* row = logits + i * K;
    const float* t = targets + i * K;
    RowStats st = row_stats(row, K, false);
    float r = 0.f;
    for (int64_t j = threadIdx.x; j < K; j += blockDim.x) {
      float a = soft_weight(t, w, j, e, inv_k);
      if (a != 0.f) r += a * (st.lse - to_float(row[j]));
    }
    r = block_combine<SumCombine>(r);
    if (threadIdx.x == 0) row_loss[i] = r;
  }
}

template <typename T>
__global__ void soft_ce_backward_kernel(const float* grad_loss, const T* logits, const float* targets, int64_t N,
                                        int64_t K, float e, const float* w, T* dlogits) {
  const float inv_k = 1.f / static_cast<float>(K);
  const float g = *grad_loss / static_cast<float>(N);
  for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {
    const T* row = logits + i * K;
    const float* t = targets + i * K;
    RowStats st = row_stats(row, K, false);
    float asum = 0.f;
    for (int64_t j = threadIdx.x; j < K; j += blockDim.x) asum += soft_weight(t, w, j, e, inv_k);
    asum = block_combine<SumCombine>(asum);
    for (int64_t j = threadIdx.x; j < K; j += blockDim.x) {
      float p = expf(to_float(row[j]) - st.lse);
      dlogits[i * K + j] = from_float<T>(g * (p * asum - soft_weight(t, w, j, e, inv_k)));
    }
  }
}

// One block: the correct count by a block reduction, then thread 0 updates acc (see cuda_ops.h).
template <typename T>
__global__ void step_stats_kernel(double* acc, const float* loss, const T* logits, const int64_t* labels, int64_t N,
                                  int64_t K, double weight, int64_t step) {
  float correct = 0.f;
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
    const T* row = logits + i * K;
    int64_t best = 0;
    float bv = to_float(row[0]);
    for (int64_t j = 1; j < K; ++j) {
      float v = to_float(row[j]);
      if (v > bv) bv = v, best = j;
    }
    correct += best == labels[i] ? 1.f : 0.f;
  }
  correct = block_combine<SumCombine>(correct);
  if (threadIdx.x == 0) {
    float l = *loss;
    if (isfinite(l)) {
      acc[0] += static_cast<double>(l) * weight;
    } else {
      if (acc[2] == 0) {
        acc[3] = static_cast<double>(step);
        acc[4] = static_cast<double>(l);
      }
      acc[2] += 1;
    }
    acc[1] += static_cast<double>(correct);
  }
}

template <typename T>
__global__ void softmax_kernel(const T* logits, int64_t N, int64_t K, T* out) {
  for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {
    RowStats st = row_stats(logits + i * K, K, false);
    for (int64_t j = threadIdx.x; j < K; j += blockDim.x)
      out[i * K + j] = from_float<T>(expf(to_float(logits[i * K + j]) - st.lse));
  }
}

int threads_for_row(int64_t K) { return K >= 1024 ? 512 : K >= 256 ? 256 : K >= 64 ? 64 : 32; }

struct StoreMean {
  float* out;
  double scale;
  __device__ void operator()(int64_t, int64_t, const double* v) const { *out = static_cast<float>(v[0] * scale); }
};

// Weighted: (sum_i loss_i, sum_i w[y_i]) -> loss = sum / S (0 where S = 0), and S.
struct LoadLossWeight {
  const float* loss;
  const float* w;
  __device__ Vals<2> operator()(int64_t, int64_t r, int64_t) const { return Vals<2>{{loss[r], w[r]}}; }
};
struct StoreWeightedMean {
  float* out;
  float* wsum;
  __device__ void operator()(int64_t, int64_t, const double* v) const {
    *out = v[1] > 0 ? static_cast<float>(v[0] / v[1]) : 0.f;
    *wsum = static_cast<float>(v[1]);
  }
};

// The class weights as packed f32 on the device, checked against K (undefined when not given).
Tensor ce_weights(const char* op, const Tensor& class_weights, int64_t K) {
  if (!class_weights.defined()) return Tensor();
  KILN_CHECK(class_weights.dim() == 1 && class_weights.size(0) == K, op, ": class_weights must be (K) = (", K,
             "), got ", class_weights.str());
  return packed_f32(class_weights);
}

void check_ce_args(const char* op, const Tensor& logits, const Tensor& labels) {
  KILN_CHECK(logits.dim() == 2, op, ": logits must be (N, K), got ", logits.str());
  KILN_CHECK(labels.dim() == 1 && labels.size(0) == logits.size(0), op, ": labels must be (N) = (", logits.size(0),
             "), got ", labels.str());
  KILN_CHECK(labels.dtype() == DType::i64 || labels.dtype() == DType::i32, op, ": labels must be i64 or i32, got ",
             labels.str());
  KILN_CHECK(logits.size(0) > 0 && logits.size(1) > 0, op, ": empty logits ", logits.str());
}

template <typename F>
void dispatch_labels(DType t, F&& f) {
  if (t == DType::i64) f(TypeTag<int64_t>{});
  else f(TypeTag<int32_t>{});
}

// launch(T tag, L tag, grid, threads, stream) for logits' and labels' element types, one block per row.
template <typename F>
void launch_rows(const char* op, int device, const Tensor& logits, const Tensor& labels, F launch) {
  DeviceGuard g(device);
  int threads = threads_for_row(logits.size(1));
  int grid = static_cast<int>(std::min<int64_t>(logits.size(0), 65535));
  cudaStream_t s = stream_of(device);
  dispatch_float(logits.dtype(), op, [&](auto tag) {
    dispatch_labels(labels.dtype(), [&](auto ltag) { launch(tag, ltag, grid, threads, s); });
  });
  CUDA_CHECK_LAUNCH();
}

template <typename T> const T* cptr(const Tensor& t) { return static_cast<const T*>(t.raw_data()); }

}  // namespace

Tensor cross_entropy_forward(const Tensor& logits0, const Tensor& labels0, double label_smoothing,
                             const Tensor& class_weights, Tensor* weight_sum) {
  const char* op = "cross_entropy";
  int device = class_weights.defined() ? same_device(op, {&logits0, &labels0, &class_weights})
                                       : same_device(op, {&logits0, &labels0});
  check_ce_args(op, logits0, labels0);
  KILN_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, op, ": label_smoothing must be in [0, 1], got ",
             label_smoothing);
  Tensor logits = packed(logits0), labels = packed(labels0);
  int64_t N = logits.size(0), K = logits.size(1);
  Tensor cw = ce_weights(op, class_weights, K);
  const float* w = cw.defined() ? cptr<float>(cw) : nullptr;
  Tensor row_loss = Tensor::empty({N}, DType::f32, logits.device());
  Tensor row_w = w ? Tensor::empty({N}, DType::f32, logits.device()) : Tensor();
  Tensor out = Tensor::empty({}, DType::f32, logits.device());
  float e = static_cast<float>(label_smoothing);
  float* rl = static_cast<float*>(row_loss.raw_data());
  float* rw = w ? static_cast<float*>(row_w.raw_data()) : nullptr;
  launch_rows(op, device, logits, labels, [&](auto tag, auto ltag, int grid, int threads, cudaStream_t s) {
    using T = typename decltype(tag)::type;
    using L = typename decltype(ltag)::type;
    ce_forward_kernel<T, L><<<grid, threads, 0, s>>>(cptr<T>(logits), cptr<L>(labels), N, K, e, w, rl, rw);
  });
  DeviceGuard g(device);
  if (w) {
    Tensor wsum = Tensor::empty({}, DType::f32, logits.device());
    reduce_arb<2, SumCombine>(device, 1, N, 1, LoadLossWeight{rl, rw},
                              StoreWeightedMean{static_cast<float*>(out.raw_data()), static_cast<float*>(wsum.raw_data())});
    if (weight_sum) *weight_sum = wsum;
  } else {
    reduce_arb<1, SumCombine>(device, 1, N, 1, LoadVector{rl},
                              StoreMean{static_cast<float*>(out.raw_data()), 1.0 / static_cast<double>(N)});
  }
  return out;
}

Tensor cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits0, const Tensor& labels0,
                              double label_smoothing, const Tensor& class_weights, const Tensor& weight_sum) {
  const char* op = "cross_entropy_backward";
  int device = same_device(op, {&grad_loss, &logits0, &labels0});
  check_ce_args(op, logits0, labels0);
  KILN_CHECK(grad_loss.numel() == 1, op, ": the loss gradient must be a scalar, got ", grad_loss.str());
  KILN_CHECK(class_weights.defined() == weight_sum.defined(), op,
             ": class_weights and weight_sum (from the forward) come together");
  Tensor g32 = packed_f32(grad_loss);
  Tensor logits = packed(logits0), labels = packed(labels0);
  int64_t N = logits.size(0), K = logits.size(1);
  Tensor cw = ce_weights(op, class_weights, K);
  const float* w = cw.defined() ? cptr<float>(cw) : nullptr;
  Tensor ws = w ? packed_f32(weight_sum) : Tensor();
  KILN_CHECK(!w || (ws.numel() == 1 && ws.device() == logits.device()), op,
             ": weight_sum must be a scalar on the logits' device, got ", ws.str());
  const float* wsp = w ? cptr<float>(ws) : nullptr;
  Tensor out = empty_on(logits.shape(), logits.dtype(), logits);
  float e = static_cast<float>(label_smoothing);
  launch_rows(op, device, logits, labels, [&](auto tag, auto ltag, int grid, int threads, cudaStream_t s) {
    using T = typename decltype(tag)::type;
    using L = typename decltype(ltag)::type;
    ce_backward_kernel<T, L><<<grid, threads, 0, s>>>(cptr<float>(g32), cptr<T>(logits), cptr<L>(labels), N, K, e, w,
                                                      wsp, static_cast<T*>(out.raw_data()));
  });
  return out;
}

namespace {
void check_soft_args(const char* op, const Tensor& logits, const Tensor& targets, double label_smoothing) {
  KILN_CHECK(logits.dim() == 2 && logits.size(0) > 0 && logits.size(1) > 0, op,
             ": logits must be (N, K) with N, K > 0, got ", logits.str());
  KILN_CHECK(targets.shape() == logits.shape(), op, ": targets ", targets.str(), " must have the logits' shape ",
             logits.str());
  KILN_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, op, ": label_smoothing must be in [0, 1], got ",
             label_smoothing);
}
}  // namespace

Tensor soft_cross_entropy_forward(const Tensor& logits0, const Tensor& targets0, double label_smoothing,
                                  const Tensor& class_weights) {
  const char* op = "soft_cross_entropy";
  int device = class_weights.defined() ? same_device(op, {&logits0, &targets0, &class_weights})
                                       : same_device(op, {&logits0, &targets0});
  check_soft_args(op, logits0, targets0, label_smoothing);
  Tensor logits = packed(logits0), targets = packed_f32(targets0);
  int64_t N = logits.size(0), K = logits.size(1);
  Tensor cw = ce_weights(op, class_weights, K);
  const float* w = cw.defined() ? cptr<float>(cw) : nullptr;
  Tensor row_loss = Tensor::empty({N}, DType::f32, logits.device());
  Tensor out = Tensor::empty({}, DType::f32, logits.device());
  float e = static_cast<float>(label_smoothing);
  float* rl = static_cast<float*>(row_loss.raw_data());
  DeviceGuard g(device);
  cudaStream_t s = stream_of(device);
  int grid = static_cast<int>(std::min<int64_t>(N, 65535));
  dispatch_float(logits.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    soft_ce_forward_kernel<T><<<grid, threads_for_row(K), 0, s>>>(cptr<T>(logits), cptr<float>(targets), N, K, e, w, rl);
  });
  CUDA_CHECK_LAUNCH();
  reduce_arb<1, SumCombine>(device, 1, N, 1, LoadVector{rl},
                            StoreMean{static_cast<float*>(out.raw_data()), 1.0 / static_cast<double>(N)});
  return out;
}

Tensor soft_cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits0, const Tensor& targets0,
                                   double label_smoothing, const Tensor& class_weights) {
  const char* op = "soft_cross_entropy_backward";
  int device = same_device(op, {&grad_loss, &logits0, &targets0});
  check_soft_args(op, logits0, targets0, label_smoothing);
  KILN_CHECK(grad_loss.numel() == 1, op, ": the loss gradient must be a scalar, got ", grad_loss.str());
  Tensor g32 = packed_f32(grad_loss);
  Tensor logits = packed(logits0), targets = packed_f32(targets0);
  int64_t N = logits.size(0), K = logits.size(1);
  Tensor cw = ce_weights(op, class_weights, K);
  const float* w = cw.defined() ? cptr<float>(cw) : nullptr;
  Tensor out = empty_on(logits.shape(), logits.dtype(), logits);
  float e = static_cast<float>(label_smoothing);
  DeviceGuard g(device);
  cudaStream_t s = stream_of(device);
  int grid = static_cast<int>(std::min<int64_t>(N, 65535));
  dispatch_float(logits.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    soft_ce_backward_kernel<T><<<grid, threads_for_row(K), 0, s>>>(cptr<float>(g32), cptr<T>(logits),
                                                                   cptr<float>(targets), N, K, e, w,
                                                                   static_cast<T*>(out.raw_data()));
  });
  CUDA_CHECK_LAUNCH();
  return out;
}

void accumulate_step_stats(const Tensor& acc, const Tensor& loss, const Tensor& logits0, const Tensor& labels0,
                           double weight, int64_t step) {
  const char* op = "accumulate_step_stats";
  int device = same_device(op, {&acc, &loss, &logits0, &labels0});
  KILN_CHECK(acc.dtype() == DType::f64 && acc.numel() == 5 && acc.is_contiguous(), op, ": acc must be 5 packed f64, got ",
             acc.str());
  KILN_CHECK(loss.dtype() == DType::f32 && loss.numel() == 1, op, ": loss must be one f32 value, got ", loss.str());
  KILN_CHECK(logits0.dim() == 2 && labels0.dim() == 1 && labels0.size(0) == logits0.size(0) &&
                 labels0.dtype() == DType::i64,
             op, ": logits (N, K) and i64 labels (N), got ", logits0.str(), " and ", labels0.str());
  Tensor logits = packed(logits0), labels = packed(labels0), l = packed(loss);
  int64_t N = logits.size(0), K = logits.size(1);
  if (K == 0) N = 0;  // no class to pick: nothing is correct
  DeviceGuard g(device);
  cudaStream_t s = stream_of(device);
  dispatch_float(logits.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    step_stats_kernel<T><<<1, 256, 0, s>>>(static_cast<double*>(acc.raw_data()), static_cast<const float*>(l.raw_data()),
                                           static_cast<const T*>(logits.raw_data()),
                                           static_cast<const int64_t*>(labels.raw_data()), N, K, weight, step);
  });
  CUDA_CHECK_LAUNCH();
}

Tensor softmax(const Tensor& logits0) {
  int device = same_device("softmax", {&logits0});
  KILN_CHECK(logits0.dim() == 2, "softmax: logits must be (N, K), got ", logits0.str());
  Tensor logits = packed(logits0);
  int64_t N = logits.size(0), K = logits.size(1);
  Tensor out = empty_on(logits.shape(), logits.dtype(), logits);
  if (out.numel() == 0) return out;
  DeviceGuard g(device);
  cudaStream_t s = stream_of(device);
  int grid = static_cast<int>(std::min<int64_t>(N, 65535));
  dispatch_float(logits.dtype(), "softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_kernel<T><<<grid, threads_for_row(K), 0, s>>>(static_cast<const T*>(logits.raw_data()), N, K,
                                                          static_cast<T*>(out.raw_data()));
  });
  CUDA_CHECK_LAUNCH();
  return out;
}

}  // namespace kiln::cuda
