// Softmax and softmax cross-entropy on the CPU (the kernels of core/ops/loss.h's slots; the ops
// are core/ops/loss.cpp), one row per sample (OpenMP over rows).
//   lse_i  = m_i + log s_i, s_i = sum_k exp(z_ik - m_i), m_i = max_k z_ik
//   loss_i = (1-e) * (lse_i - z_iy) + e * mean_k (lse_i - z_ik) = lse_i - (1-e) z_iy - e * mean_k z_ik
//   loss   = mean_i loss_i
//   dloss/dz_ik = (softmax_ik - (1-e) [k == y_i] - e/K) / N
// With class weights w (PyTorch's weighted mean, S = sum_i w_{y_i}):
//   loss_i = (1-e) w_{y_i} (lse_i - z_iy) + (e/K) sum_k w_k (lse_i - z_ik),  loss = sum_i loss_i / S
//   dloss/dz_ik = ((1-e) w_{y_i} (softmax_ik - [k == y_i]) + (e/K) (W softmax_ik - w_k)) / S,  W = sum_k w_k
// Rows in f32 (f64 for f64 logits), the batch sum in double. The forward's saved state is the
// per-row (m_i, log s_i) as a (2, N) f64 tensor; the backward takes it with the logits, labels (or
// targets) and weights, and recomputes the softmax. Tests: tests/core/loss_test.cpp,
// tests/core/soft_loss_test.cpp, tests/core/weighted_loss_test.cpp.
#include <cmath>
#include <vector>

#include "core/ops/loss.h"
#include "core/ops/nn_util.h"

namespace kiln::cpu {

namespace nn = ops::nn;

namespace {

constexpr int64_t kParallelMin = 16384;

// log sum_k exp(z[k]) as {m, log sum_k exp(z[k] - m)} with m = max_k z[k].
// NOTE: kept as two parts: exp((z - m) - log_s) is accurate to the last bit of the dtype, while
// exp(z - lse) with lse = m + log_s rounded to f32 loses up to |m| * 2^-24 (3e-5 at |z| ~ 1000).
template <typename T>
struct Lse {
  T m, log_s;
};
template <typename T>
Lse<T> log_sum_exp(const T* z, int64_t K) {
  T m = z[0];
  for (int64_t k = 1; k < K; ++k) m = (z[k] > m) | (z[k] != z[k]) ? z[k] : m;  // a NaN max makes the row NaN
  if (std::isinf(m)) return {m, T(0)};  // all -inf (or a +inf): the shifted sum below would be NaN
  T s = 0;
  for (int64_t k = 0; k < K; ++k) s += std::exp(z[k] - m);
  return {m, std::log(s)};
}

std::vector<int64_t> checked_labels(const Tensor& logits, const Tensor& labels) {
  int64_t N = logits.size(0), K = logits.size(1);
  std::vector<int64_t> y = labels.to_int_vector();
  for (int64_t i = 0; i < N; ++i)
    KILN_CHECK(y[i] >= 0 && y[i] < K, "cross_entropy: label ", y[i], " at index ", i, " is out of range [0, ", K,
               ") for logits ", logits.str());
  return y;
}

// What backward needs: the labels, each row's log-sum-exp parts, and the class weights (if any).
struct CeSaved {
  std::vector<int64_t> y;
  std::vector<double> m, log_s;
  double e = 0;
  std::vector<double> w;  // empty: unweighted
  double wsum = 0;        // sum_i w[y_i] (weighted only): the divisor
};

std::vector<double> checked_weights(const Tensor& logits, const Tensor& weights) {
  nn::check_floating("cross_entropy", "class_weights", weights);
  KILN_CHECK(weights.dim() == 1 && weights.size(0) == logits.size(1), "cross_entropy: class_weights ", weights.str(),
             " must be (K) = [", logits.size(1), "] for logits ", logits.str());
  std::vector<double> w = weights.to_double_vector();
  for (size_t k = 0; k < w.size(); ++k)
    KILN_CHECK(std::isfinite(w[k]) && w[k] >= 0, "cross_entropy: class_weights[", k, "] = ", w[k],
               " must be finite and >= 0");
  return w;
}

// sum_i w[y_i], in row order (the forward and the backward get the same bits).
double weight_sum(const std::vector<int64_t>& y, const std::vector<double>& w) {
  double sum = 0;
  for (int64_t yi : y) sum += w[yi];
  return sum;
}

// Returns the loss (the mean, or the weighted mean); fills s.m, s.log_s (and s.wsum when weighted).
template <typename T>
double ce_forward(const T* z, int64_t N, int64_t K, CeSaved& s) {
  std::vector<double> row(N);
  s.m.resize(N);
  s.log_s.resize(N);
  const double e = s.e;
  const double* w = s.w.empty() ? nullptr : s.w.data();
#pragma omp parallel for schedule(static) if (N * K > kParallelMin)
  for (int64_t i = 0; i < N; ++i) {
    const T* zi = z + i * K;
    Lse<T> l = log_sum_exp(zi, K);
    s.m[i] = l.m;
    s.log_s[i] = l.log_s;
    // In double: m - z_y is exact, so huge logits lose nothing here.
    const double lse = static_cast<double>(l.log_s) + l.m;
    if (!w) {
      double zsum = 0;
      if (e != 0)
        for (int64_t k = 0; k < K; ++k) zsum += zi[k];
      row[i] = lse - (1 - e) * zi[s.y[i]] - e * zsum / K;
    } else {
      double smooth = 0;  // sum_k w_k (lse - z_k)
      if (e != 0)
        for (int64_t k = 0; k < K; ++k) smooth += w[k] * (lse - zi[k]);
      row[i] = (1 - e) * w[s.y[i]] * (lse - zi[s.y[i]]) + e / K * smooth;
    }
  }
  double sum = 0;  // in row order: the loss does not depend on the thread count
  for (double r : row) sum += r;
  if (!w) return sum / N;
  s.wsum = weight_sum(s.y, s.w);
  return s.wsum > 0 ? sum / s.wsum : 0.0;
}

// Unweighted: dz = gscale * (softmax - (1-e) onehot - e/K), gscale = upstream gradient / N.
// Weighted: dz = gscale * ((1-e) w_y (softmax - onehot) + (e/K) (W softmax - w)), gscale = upstream / S.
template <typename T>
void ce_backward(const T* z, int64_t N, int64_t K, const CeSaved& s, double gscale, T* dz) {
  const double* w = s.w.empty() ? nullptr : s.w.data();
  double wtotal = 0;
  if (w)
    for (int64_t k = 0; k < K; ++k) wtotal += w[k];
#pragma omp parallel for schedule(static) if (N * K > kParallelMin)
  for (int64_t i = 0; i < N; ++i) {
    const T m = static_cast<T>(s.m[i]), ls = static_cast<T>(s.log_s[i]);
    const double wy = w ? w[s.y[i]] : 1.0;
    const T a = static_cast<T>(w ? gscale * ((1 - s.e) * wy + s.e * wtotal / K) : gscale);
    const T hit = static_cast<T>(gscale * (1 - s.e) * wy);
    if (w) {
      const double off = gscale * s.e / K;
      for (int64_t k = 0; k < K; ++k)
        dz[i * K + k] = a * std::exp((z[i * K + k] - m) - ls) - static_cast<T>(off * w[k]);
    } else {
      const T off = static_cast<T>(gscale * s.e / K);
      for (int64_t k = 0; k < K; ++k) dz[i * K + k] = a * std::exp((z[i * K + k] - m) - ls) - off;
    }
    dz[i * K + s.y[i]] -= hit;
  }
}

// a_ik = w_k ((1-e) t_ik + e/K) and A_i = sum_k a_ik (rebuilt from the targets in the backward), and
// each row's log-sum-exp parts.
struct SoftSaved {
  std::vector<double> a, asum, m, log_s;
};

template <typename T>
double soft_forward(const T* z, int64_t N, int64_t K, SoftSaved& s) {
  std::vector<double> row(N);
  s.m.resize(N);
  s.log_s.resize(N);
#pragma omp parallel for schedule(static) if (N * K > kParallelMin)
  for (int64_t i = 0; i < N; ++i) {
    const T* zi = z + i * K;
    Lse<T> l = log_sum_exp(zi, K);
    s.m[i] = l.m;
    s.log_s[i] = l.log_s;
    const double lse = static_cast<double>(l.log_s) + l.m;
    double r = 0;
    for (int64_t k = 0; k < K; ++k) {
      const double a = s.a[i * K + k];
      if (a != 0) r += a * (lse - zi[k]);  // a zero target never turns a -inf logit into NaN
    }
    row[i] = r;
  }
  double sum = 0;
  for (double r : row) sum += r;
  return sum / N;
}

template <typename T>
void soft_backward(const T* z, int64_t N, int64_t K, const SoftSaved& s, double gscale, T* dz) {
#pragma omp parallel for schedule(static) if (N * K > kParallelMin)
  for (int64_t i = 0; i < N; ++i) {
    const T m = static_cast<T>(s.m[i]), ls = static_cast<T>(s.log_s[i]);
    const T scale = static_cast<T>(gscale * s.asum[i]);
    for (int64_t k = 0; k < K; ++k)
      dz[i * K + k] = scale * std::exp((z[i * K + k] - m) - ls) - static_cast<T>(gscale * s.a[i * K + k]);
  }
}

// a_ik and A_i of SoftSaved from the targets (N, K) and the class weights (empty: 1).
void soft_targets(const Tensor& targets, const std::vector<double>& w, double e, int64_t N, int64_t K, SoftSaved& s) {
  s.a = targets.contiguous().to_double_vector();
  s.asum.assign(N, 0.0);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t k = 0; k < K; ++k) {
      double& a = s.a[i * K + k];
      a = ((1 - e) * a + e / K) * (w.empty() ? 1.0 : w[k]);
      s.asum[i] += a;
    }
}

// The saved state: each row's (m, log s) as a (2, N) f64 tensor, and back.
Tensor save_lse(const std::vector<double>& m, const std::vector<double>& log_s) {
  std::vector<double> v(m);
  v.insert(v.end(), log_s.begin(), log_s.end());
  return Tensor::from_vector(v, {2, static_cast<int64_t>(m.size())});
}
void load_lse(const Tensor& saved, int64_t N, std::vector<double>& m, std::vector<double>& log_s) {
  KILN_CHECK(saved.defined() && saved.numel() == 2 * N, "cross_entropy: the backward needs the forward's saved state");
  std::vector<double> v = saved.to_double_vector();
  m.assign(v.begin(), v.begin() + N);
  log_s.assign(v.begin() + N, v.end());
}

// A row loss in the compute dtype: forward(z) -> the loss, as a scalar tensor.
template <typename Fwd>
Tensor row_loss_forward(const Tensor& logits, Fwd forward) {
  const DType ct = nn::compute_dtype(logits.dtype());
  Tensor z = nn::to_compute(logits, ct);
  double loss = nn::dispatch_compute(ct, [&](auto t) {
    using T = decltype(t);
    return forward(z.data<T>());
  });
  return Tensor::scalar(loss, ct);
}

// Its gradient: backward(z, dz) fills dz (the compute dtype), returned in logits' dtype.
template <typename Bwd>
Tensor row_loss_backward(const Tensor& logits, Bwd backward) {
  const DType ct = nn::compute_dtype(logits.dtype());
  Tensor z = nn::to_compute(logits, ct);
  Tensor dz = Tensor::empty(logits.shape(), ct);
  nn::dispatch_compute(ct, [&](auto t) {
    using T = decltype(t);
    backward(z.data<T>(), dz.data<T>());
  });
  return nn::from_compute(dz, logits.dtype());
}

}  // namespace

Tensor cross_entropy_forward(const Tensor& logits, const Tensor& labels, double label_smoothing,
                             const Tensor& class_weights, Tensor* saved) {
  const int64_t N = logits.size(0), K = logits.size(1);
  CeSaved s;
  s.y = checked_labels(logits, labels);
  s.e = label_smoothing;
  if (class_weights.defined()) s.w = checked_weights(logits, class_weights);
  Tensor loss = row_loss_forward(logits, [&](auto* z) { return ce_forward(z, N, K, s); });
  if (saved) *saved = save_lse(s.m, s.log_s);
  return loss;
}

Tensor cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& labels,
                              double label_smoothing, const Tensor& class_weights, const Tensor& saved) {
  const int64_t N = logits.size(0), K = logits.size(1);
  CeSaved s;
  s.y = labels.to_int_vector();  // checked by the forward
  s.e = label_smoothing;
  if (class_weights.defined()) {
    s.w = class_weights.to_double_vector();
    s.wsum = weight_sum(s.y, s.w);
  }
  load_lse(saved, N, s.m, s.log_s);
  const double div = s.w.empty() ? static_cast<double>(N) : s.wsum;
  const double g = grad_loss.item();
  return row_loss_backward(logits, [&](auto* z, auto* dz) { ce_backward(z, N, K, s, div > 0 ? g / div : 0.0, dz); });
}

Tensor soft_cross_entropy_forward(const Tensor& logits, const Tensor& targets, double label_smoothing,
                                  const Tensor& class_weights, Tensor* saved) {
  const int64_t N = logits.size(0), K = logits.size(1);
  std::vector<double> w = class_weights.defined() ? checked_weights(logits, class_weights) : std::vector<double>();
  SoftSaved s;
  soft_targets(targets, w, label_smoothing, N, K, s);
  Tensor loss = row_loss_forward(logits, [&](auto* z) { return soft_forward(z, N, K, s); });
  if (saved) *saved = save_lse(s.m, s.log_s);
  return loss;
}

Tensor soft_cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets,
                                   double label_smoothing, const Tensor& class_weights, const Tensor& saved) {
  const int64_t N = logits.size(0), K = logits.size(1);
  std::vector<double> w = class_weights.defined() ? class_weights.to_double_vector() : std::vector<double>();
  SoftSaved s;
  soft_targets(targets, w, label_smoothing, N, K, s);
  load_lse(saved, N, s.m, s.log_s);
  const double g = grad_loss.item();
  return row_loss_backward(logits, [&](auto* z, auto* dz) { soft_backward(z, N, K, s, g / N, dz); });
}

Tensor softmax(const Tensor& logits) {
  const DType ct = nn::compute_dtype(logits.dtype());
  Tensor z = nn::to_compute(logits, ct);
  Tensor out = Tensor::empty(z.shape(), ct);
  const int64_t K = z.size(-1), rows = z.numel() / K;
  nn::dispatch_compute(ct, [&](auto t) {
    using T = decltype(t);
    const T* pz = z.data<T>();
    T* po = out.data<T>();
#pragma omp parallel for schedule(static) if (rows * K > kParallelMin)
    for (int64_t i = 0; i < rows; ++i) {
      const Lse<T> l = log_sum_exp(pz + i * K, K);
      for (int64_t k = 0; k < K; ++k) po[i * K + k] = std::exp((pz[i * K + k] - l.m) - l.log_s);
    }
  });
  return nn::from_compute(out, logits.dtype());
}

}  // namespace kiln::cpu
