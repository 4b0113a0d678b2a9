// Batch normalisation on the CPU (the kernels of core/ops/batch_norm.h's slots; the op is
// core/ops/batch_norm.cpp), channel = last dim: x is viewed as M rows of C channels
// (M = N*H*W for NHWC, M = N for (N, C)). Own OpenMP loops, vectorised over the channels: the same
// passes as oneDNN 2.6's nhwc batch_normalization (stats, normalise; reduce, dx) at the same speed
// on (32, 32, 32, 64) f32, 2-core AVX2 EPYC, min of 100-200 interleaved runs on a loaded machine:
//   1 thread:  fwd 2.4-3.7 ms vs oneDNN 2.1-3.9;  bwd (dx, dgamma, dbeta) 3.0-8.4 vs 3.7-12.8
//   2 threads: fwd 1.4-2.1 ms vs oneDNN 0.9-1.6;  bwd 1.9-2.8 vs 2.0-2.7
// and they also run f64 (exact gradchecks) and bf16/f16 (through f32) with one code path, need no
// primitive cache, and give the same bits on every run. Statistics in f32 (f64 for f64 tensors)
// with blocked double accumulation; the saved mean and invstd handed to the backward are f64.
//   forward (training): mean, biased var -> y = (x - mean) * invstd * gamma + beta; running stats
//                       updated with the unbiased var, as PyTorch
//   backward: dbeta = sum(dy), dgamma = sum(dy * xhat),
//             dx = gamma*invstd * (dy - dbeta/M - xhat*dgamma/M)   (training)
//             dx = gamma*invstd * dy                                (eval: the stats are constants)
//   batch_norm_relu_forward: the same passes, the second writing relu(y + residual) (bit for bit
//     the three kernels); its backward is relu_backward on y, then the backward above, in the same
//     two passes: the first reads y beside dy and x and writes the masked gradient g (dresidual
//     when there is a residual), the second reads g; so g costs no pass of its own (bit for bit
//     relu_backward, then batch_norm_backward). `kiln bench bn_relu` times it against the two
//     kernels (docs/architecture.md): 1-18% faster; masking in both passes without writing g was
//     2-6% slower.
// Also increment_i64 (num_batches_tracked). Tests: tests/core/batch_norm_test.cpp.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <type_traits>
#include <vector>

#include "core/ops/batch_norm.h"
#include "core/ops/elementwise.h"
#include "core/ops/bf16_rows.h"
#include "core/ops/nn_util.h"

namespace kiln::cpu {

// core/cpu/elementwise.cpp (batch_norm_relu_forward's f16 path runs them after the normalisation)
Tensor binary(ElementwiseBinary op, const Tensor& a, const Tensor& b);
Tensor unary(ElementwiseUnary op, const Tensor& a);

namespace nn = ops::nn;
using ops::bf16_to_f32;
using ops::f32_to_bf16;

namespace {

constexpr int64_t kBlockRows = 256;
constexpr int64_t kParallelMin = 32768;  // elements below which threads cost more than they save

// Rows [r0, r0 + n) of an (M, C) tensor read as T: a pointer into the tensor when it holds T, else
// (bf16, the activations of mixed precision, with T = float) the rows converted into `buf` (n * C
// values). The kernels below walk the rows in chunks of chunk_rows(C) (about kChunkElems values),
// converted in cache: this replaces whole-tensor copies to f32 and back, and, unlike a conversion
// per row, costs one call per chunk when C is small (16 channels: a call per 16 values made the
// conversions a quarter of a bf16 ResNet-20 step). The arithmetic and rounding are the same.
constexpr int64_t kChunkElems = 4096;

inline int64_t chunk_rows(int64_t C) { return std::max<int64_t>(1, kChunkElems / std::max<int64_t>(C, 1)); }

template <typename T>
struct RowsIn {
  const T* direct = nullptr;
  const uint16_t* bf16 = nullptr;
  int64_t C = 0;
  explicit RowsIn(const Tensor& t) : C(t.size(-1)) {
    if constexpr (std::is_same_v<T, float>) {
      if (t.dtype() == DType::bf16) {
        bf16 = static_cast<const uint16_t*>(t.raw_data());
        return;
      }
    }
    direct = t.data<T>();
  }
  const T* rows(int64_t r0, int64_t n, T* buf) const {
    if (direct) return direct + r0 * C;
    if constexpr (std::is_same_v<T, float>) bf16_to_f32(bf16 + r0 * C, buf, n * C);
    return buf;
  }
};

// The output side: rows(r0, n, buf) is where to write rows [r0, r0 + n) (the tensor itself, or
// `buf` for bf16); commit(r0, n, buf) stores rows written to `buf`.
template <typename T>
struct RowsOut {
  T* direct = nullptr;
  uint16_t* bf16 = nullptr;
  int64_t C = 0;
  explicit RowsOut(const Tensor& t) : C(t.size(-1)) {
    if constexpr (std::is_same_v<T, float>) {
      if (t.dtype() == DType::bf16) {
        bf16 = static_cast<uint16_t*>(t.raw_data());
        return;
      }
    }
    direct = t.data<T>();
  }
  T* rows(int64_t r0, int64_t /*n*/, T* buf) const { return direct ? direct + r0 * C : buf; }
  void commit(int64_t r0, int64_t n, const T* buf) const {
    if (direct) return;
    if constexpr (std::is_same_v<T, float>) f32_to_bf16(buf, bf16 + r0 * C, n * C);
  }
};

// Whether the kernels below read and write `t` as it is (T itself, or bf16 rows converted on the
// fly); anything else (f16) goes through a converted copy.
template <typename T>
bool rows_direct(const Tensor& t) {
  return t.dtype() == dtype_of<T>::value || (std::is_same_v<T, float> && t.dtype() == DType::bf16);
}

// Two per-channel sums over M rows of C channels: body(r0, n, a, b, buf) adds the terms of rows
// [r0, r0 + n) (n <= chunk_rows(C)), in row order, into the C-long accumulators a and b (type T);
// buf[0..nbuf) (nbuf <= kMaxBufs) are this thread's buffers of n * C values (for RowsIn::rows and
// the like). Rows are summed
// in T within blocks of <= kBlockRows, blocks in double, so f32 sums over millions of rows stay
// accurate while the inner loop stays vectorised. Each thread keeps its own partials, merged in thread
// order: the same bits on every run (for a thread count), and the chunking does not change them.
constexpr int kMaxBufs = 4;

template <typename T, typename Body>
void column_sums2(int64_t M, int64_t C, int nbuf, Body body, std::vector<double>& s1, std::vector<double>& s2) {
  int nthreads = M * C > kParallelMin ? omp_get_max_threads() : 1;
  // Few rows of many channels ((N, C) features): smaller blocks, so every thread gets one.
  int64_t rows = std::clamp<int64_t>((M + nthreads - 1) / nthreads, 1, kBlockRows);
  int64_t blocks = (M + rows - 1) / rows;
  const int64_t chunk = std::min(rows, chunk_rows(C));
  std::vector<double> part(static_cast<size_t>(nthreads) * 2 * C, 0.0);
  int used = 1;
#pragma omp parallel num_threads(nthreads)
  {
    int tid = omp_get_thread_num();
#pragma omp single
    used = omp_get_num_threads();
    double* d1 = part.data() + static_cast<size_t>(tid) * 2 * C;
    double* d2 = d1 + C;
    std::vector<T> a(C), b(C), store(static_cast<size_t>(nbuf) * chunk * C);
    T* buf[kMaxBufs] = {};
    for (int i = 0; i < nbuf; ++i) buf[i] = store.data() + static_cast<size_t>(i) * chunk * C;
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      std::fill(a.begin(), a.end(), T(0));
      std::fill(b.begin(), b.end(), T(0));
      int64_t r1 = std::min(M, (blk + 1) * rows);
      for (int64_t r = blk * rows; r < r1; r += chunk)
        body(r, std::min(chunk, r1 - r), a.data(), b.data(), buf);
      for (int64_t c = 0; c < C; ++c) {
        d1[c] += a[c];
        d2[c] += b[c];
      }
    }
  }
  s1.assign(C, 0.0);
  s2.assign(C, 0.0);
  for (int t = 0; t < used; ++t) {
    const double* d1 = part.data() + static_cast<size_t>(t) * 2 * C;
    for (int64_t c = 0; c < C; ++c) {
      s1[c] += d1[c];
      s2[c] += d1[C + c];
    }
  }
}

// out[r, c] = a[c] * u[r, c] + b[c] * v[r, c] + d[c] (v may be null: that term is dropped).
template <typename T>
void affine_rows(int64_t M, int64_t C, const RowsIn<T>& u, const RowsIn<T>* v, const T* a, const T* b, const T* d,
                 const RowsOut<T>& out) {
  const int64_t chunk = chunk_rows(C), chunks = (M + chunk - 1) / chunk;
#pragma omp parallel if (M * C > kParallelMin)
  {
    std::vector<T> ub(chunk * C), vb(v ? chunk * C : 0), ob(chunk * C);  // bf16 rows' buffers
#pragma omp for schedule(static)
    for (int64_t k = 0; k < chunks; ++k) {
      const int64_t r0 = k * chunk, n = std::min(chunk, M - r0);
      const T* ur = u.rows(r0, n, ub.data());
      T* o = out.rows(r0, n, ob.data());
      if (v) {
        const T* vr = v->rows(r0, n, vb.data());
        for (int64_t r = 0; r < n; ++r) {
          const T *ui = ur + r * C, *vi = vr + r * C;
          T* oi = o + r * C;
#pragma omp simd
          for (int64_t c = 0; c < C; ++c) oi[c] = a[c] * ui[c] + b[c] * vi[c] + d[c];
        }
      } else {
        for (int64_t r = 0; r < n; ++r) {
          const T* ui = ur + r * C;
          T* oi = o + r * C;
#pragma omp simd
          for (int64_t c = 0; c < C; ++c) oi[c] = a[c] * ui[c] + d[c];
        }
      }
      out.commit(r0, n, o);
    }
  }
}

// relu_backward(g, y) as the binary kernel computes it: a NaN output passes the gradient.
template <typename T>
inline T relu_grad(T g, T y) {
  return y <= 0 ? T(0) : g;
}

// relu(x) as the unary kernel computes it: NaN stays NaN, -0 and negatives become +0.
template <typename T>
inline T relu_of(T v) {
  return ((v > 0) | (v != v)) ? v : T(0);
}

// The fused epilogue of batch_norm_relu_forward: out[r, c] = relu(a[c] * u[r, c] + d[c] [+ res[r, c]]).
// Bit for bit the three kernels in a row: the normalised value is rounded to out's dtype (bf16 rows)
// before the residual is added, and the sum is rounded once on commit; relu is exact in any dtype.
template <typename T>
void affine_relu_rows(int64_t M, int64_t C, const RowsIn<T>& u, const RowsIn<T>* res, const T* a, const T* d,
                      const RowsOut<T>& out) {
  const int64_t chunk = chunk_rows(C), chunks = (M + chunk - 1) / chunk;
#pragma omp parallel if (M * C > kParallelMin)
  {
    std::vector<T> ub(chunk * C), rb(res ? chunk * C : 0), ob(chunk * C);  // bf16 rows' buffers
    std::vector<uint16_t> hb(out.bf16 && res ? chunk * C : 0);
#pragma omp for schedule(static)
    for (int64_t k = 0; k < chunks; ++k) {
      const int64_t r0 = k * chunk, n = std::min(chunk, M - r0);
      const T* ur = u.rows(r0, n, ub.data());
      T* o = out.rows(r0, n, ob.data());
      if (res) {
        const T* rr = res->rows(r0, n, rb.data());
        if constexpr (std::is_same_v<T, float>) {
          if (out.bf16) {  // the normalised rows as the bf16 tensor batch_norm_forward would return
            for (int64_t r = 0; r < n; ++r) {
              const T* ui = ur + r * C;
              T* oi = o + r * C;
#pragma omp simd
              for (int64_t c = 0; c < C; ++c) oi[c] = a[c] * ui[c] + d[c];
            }
            f32_to_bf16(o, hb.data(), n * C);
            bf16_to_f32(hb.data(), o, n * C);
#pragma omp simd
            for (int64_t i = 0; i < n * C; ++i) o[i] = relu_of(o[i] + rr[i]);
            out.commit(r0, n, o);
            continue;
          }
        }
        for (int64_t r = 0; r < n; ++r) {
          const T *ui = ur + r * C, *ri = rr + r * C;
          T* oi = o + r * C;
#pragma omp simd
          for (int64_t c = 0; c < C; ++c) {
            T v = a[c] * ui[c] + d[c];
            oi[c] = relu_of(v + ri[c]);
          }
        }
      } else {
        for (int64_t r = 0; r < n; ++r) {
          const T* ui = ur + r * C;
          T* oi = o + r * C;
#pragma omp simd
          for (int64_t c = 0; c < C; ++c) oi[c] = relu_of(a[c] * ui[c] + d[c]);
        }
      }
      out.commit(r0, n, o);
    }
  }
}

// The per-channel constants of the normalisation: the forward computes mean and invstd (training) or
// takes them from the running statistics (eval); the backward gets them back from the forward's saved tensors.
struct BnSaved {
  std::vector<double> gamma, mean, invstd;
  bool training = false;
};

template <typename T>
std::vector<T> cast_vec(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

// What batch_norm_relu_forward adds after the normalisation: relu, after adding `residual` when defined.
struct BnEpilogue {
  bool relu = false;
  Tensor residual;  // x's shape and dtype, contiguous
};

// x: T, or bf16 with T = float (rows_direct); y has x's dtype.
template <typename T>
Tensor bn_forward(const Tensor& x, const std::vector<double>& beta, bool use_batch_stats, double eps, BnSaved& s,
                  std::vector<double>& batch_var, const BnEpilogue& epi) {
  const RowsIn<T> rx(x);
  int64_t C = x.size(-1), M = x.numel() / C;
  if (use_batch_stats) {
    // NOTE: shifted by the first row: x0 lies a few std from the mean, so the one-pass
    // E[d^2] - E[d]^2 over d = x - x0 does not cancel catastrophically when |mean| >> std.
    std::vector<T> buf0(C);
    const T* row0 = rx.rows(0, 1, buf0.data());
    std::vector<T> x0(row0, row0 + C);
    std::vector<double> s1, s2;
    column_sums2<T>(M, C, 1, [&](int64_t r0, int64_t n, T* a, T* b, T* const* buf) {
      const T* xs = rx.rows(r0, n, buf[0]);
      for (int64_t r = 0; r < n; ++r) {
        const T* xr = xs + r * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) {
          T d = xr[c] - x0[c];
          a[c] += d;
          b[c] += d * d;
        }
      }
    }, s1, s2);
    s.mean.resize(C);
    s.invstd.resize(C);
    batch_var.resize(C);
    for (int64_t c = 0; c < C; ++c) {
      double m1 = s1[c] / M;
      batch_var[c] = std::max(s2[c] / M - m1 * m1, 0.0);
      s.mean[c] = x0[c] + m1;
      s.invstd[c] = 1.0 / std::sqrt(batch_var[c] + eps);
    }
  }
  std::vector<T> scale(C), shift(C);
  for (int64_t c = 0; c < C; ++c) {
    double sc = s.gamma[c] * s.invstd[c];
    scale[c] = static_cast<T>(sc);
    shift[c] = static_cast<T>(beta[c] - s.mean[c] * sc);
  }
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  if (epi.relu) {
    std::optional<RowsIn<T>> rres;
    if (epi.residual.defined()) rres.emplace(epi.residual);
    affine_relu_rows<T>(M, C, rx, rres ? &*rres : nullptr, scale.data(), shift.data(), RowsOut<T>(y));
  } else {
    affine_rows<T>(M, C, rx, nullptr, scale.data(), nullptr, shift.data(), RowsOut<T>(y));
  }
  return y;
}

// x, gy: T, or bf16 with T = float (rows_direct). Returns {dx (x's dtype), dgamma, dbeta (the
// compute dtype T), g}; dx is undefined unless need_dx. With relu_y (batch_norm_relu_backward;
// gy's shape and dtype, contiguous) the gradient is g = relu_backward(gy, relu_y): the first pass
// writes it (in gy's dtype) as it reads, the second reads it instead of gy; else g is undefined.
template <typename T>
std::vector<Tensor> bn_backward(const Tensor& x, const Tensor& gy, const BnSaved& s, bool need_dx,
                                const Tensor& relu_y = Tensor()) {
  const RowsIn<T> rx(x), rg(gy);
  int64_t C = x.size(-1), M = x.numel() / C;
  std::optional<RowsIn<T>> ry;
  Tensor g;
  std::optional<RowsOut<T>> wg;
  if (relu_y.defined()) {
    ry.emplace(relu_y);
    g = Tensor::empty(gy.shape(), gy.dtype());
    wg.emplace(g);
  }
  std::vector<T> mean = cast_vec<T>(s.mean);
  std::vector<double> sdy, sdyx;  // sum(dy), sum(dy * (x - mean))
  column_sums2<T>(M, C, ry ? 4 : 2, [&](int64_t r0, int64_t n, T* a, T* b, T* const* buf) {
    const T* xs = rx.rows(r0, n, buf[0]);
    const T* gs = rg.rows(r0, n, buf[1]);
    if (ry) {
      const T* ys = ry->rows(r0, n, buf[2]);
      T* gm = wg->rows(r0, n, buf[3]);
#pragma omp simd
      for (int64_t i = 0; i < n * C; ++i) gm[i] = relu_grad(gs[i], ys[i]);
      wg->commit(r0, n, gm);
      gs = gm;
    }
    for (int64_t r = 0; r < n; ++r) {
      const T *xr = xs + r * C, *gr = gs + r * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) {
        a[c] += gr[c];
        b[c] += gr[c] * (xr[c] - mean[c]);
      }
    }
  }, sdy, sdyx);
  const DType ct = dtype_of<T>::value;
  Tensor dgamma = Tensor::empty({C}, ct), dbeta = Tensor::empty({C}, ct);
  std::vector<T> ca(C), cb(C), cd(C);
  for (int64_t c = 0; c < C; ++c) {
    double is = s.invstd[c], a = s.gamma[c] * is, sxhat = sdyx[c] * is;
    dgamma.data<T>()[c] = static_cast<T>(sxhat);
    dbeta.data<T>()[c] = static_cast<T>(sdy[c]);
    ca[c] = static_cast<T>(a);
    if (s.training) {
      double k = a * is * sxhat / M;
      cb[c] = static_cast<T>(-k);
      cd[c] = static_cast<T>(k * s.mean[c] - a * sdy[c] / M);
    }
  }
  if (!need_dx) return {Tensor(), dgamma, dbeta, g};
  Tensor dx = Tensor::empty(x.shape(), x.dtype());
  // the gradient the second pass reads: g when the first pass wrote it, else gy
  std::optional<RowsIn<T>> rgw;
  if (g.defined()) rgw.emplace(g);
  const RowsIn<T>& ru = rgw ? *rgw : rg;
  if (s.training) affine_rows<T>(M, C, ru, &rx, ca.data(), cb.data(), cd.data(), RowsOut<T>(dx));
  else affine_rows<T>(M, C, ru, nullptr, ca.data(), nullptr, std::vector<T>(C, T(0)).data(), RowsOut<T>(dx));
  return {dx, dgamma, dbeta, g};
}

// A detached tensor the kernels read as it is (bf16 rows converted on the fly), else (f16, or a
// dtype other than the compute dtype) a contiguous copy in the compute dtype.
Tensor as_input(const Tensor& t, DType ct) {
  Tensor d = t.detach();
  const bool direct = ct == DType::f64 ? rows_direct<double>(d) : rows_direct<float>(d);
  return direct ? d.contiguous() : nn::to_compute(d, ct);
}

std::vector<double> values_or(const Tensor& t, int64_t C, double fill) {
  return t.defined() ? t.to_double_vector() : std::vector<double>(C, fill);
}

// The backward's constants from the forward's saved statistics.
BnSaved saved_of(const Tensor& gamma, const Tensor& save_mean, const Tensor& save_invstd, bool training, int64_t C) {
  BnSaved s;
  s.training = training;
  s.gamma = values_or(gamma, C, 1.0);
  s.mean = save_mean.to_double_vector();
  s.invstd = save_invstd.to_double_vector();
  return s;
}

}  // namespace

namespace {

// Both forward entries: the normalisation, then (epi.relu) the fused add and relu.
Tensor bn_forward_entry(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                        const Tensor& running_var, bool training, double momentum, double eps, Tensor* save_mean,
                        Tensor* save_invstd, std::shared_ptr<void>* saved, const BnEpilogue& epi) {
  if (saved) saved->reset();  // the CPU's backward needs nothing beyond the statistics
  const int64_t C = x.size(-1), M = x.numel() / C;
  const DType ct = nn::compute_dtype(x.dtype());
  // bf16 is read and written in converted chunks of rows (RowsIn/RowsOut); f16 through f32
  Tensor xc = as_input(x, ct);
  BnSaved s;
  s.training = training;
  s.gamma = values_or(gamma, C, 1.0);
  std::vector<double> beta_v = values_or(beta, C, 0.0), batch_var;
  if (!training) {
    s.mean = running_mean.to_double_vector();
    s.invstd = running_var.to_double_vector();
    for (double& v : s.invstd) v = 1.0 / std::sqrt(v + eps);
  }
  Tensor y = nn::dispatch_compute(ct, [&](auto t) {
    return bn_forward<decltype(t)>(xc, beta_v, training, eps, s, batch_var, epi);
  });
  if (training && running_mean.defined()) {
    std::vector<double> rm = running_mean.to_double_vector(), rv = running_var.to_double_vector();
    double unbias = static_cast<double>(M) / static_cast<double>(M - 1);
    for (int64_t c = 0; c < C; ++c) {
      rm[c] = (1 - momentum) * rm[c] + momentum * s.mean[c];
      rv[c] = (1 - momentum) * rv[c] + momentum * batch_var[c] * unbias;
    }
    running_mean.detach().copy_(Tensor::from_vector(rm, {C}));
    running_var.detach().copy_(Tensor::from_vector(rv, {C}));
  }
  if (save_mean) *save_mean = Tensor::from_vector(s.mean, {C});  // f64: the backward's constants unrounded
  if (save_invstd) *save_invstd = Tensor::from_vector(s.invstd, {C});
  return nn::from_compute(y, x.dtype());
}

}  // namespace

Tensor batch_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                          const Tensor& running_var, bool training, double momentum, double eps, Tensor* save_mean,
                          Tensor* save_invstd, std::shared_ptr<void>* saved) {
  return bn_forward_entry(x, gamma, beta, running_mean, running_var, training, momentum, eps, save_mean, save_invstd,
                          saved, BnEpilogue{});
}

Tensor batch_norm_relu_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                               const Tensor& running_var, bool training, double momentum, double eps,
                               const Tensor& residual, Tensor* save_mean, Tensor* save_invstd,
                               std::shared_ptr<void>* saved) {
  // residual: x's shape and dtype (checked by the op, ops::batch_norm_relu)
  const DType ct = nn::compute_dtype(x.dtype());
  const bool fused_rows = ct == DType::f64 ? rows_direct<double>(x) : rows_direct<float>(x);
  if (!fused_rows) {
    // f16: computed through f32 copies and rounded on exit, so the add and the relu run as the
    // separate kernels, each rounding to f16 as they do.
    Tensor y = batch_norm_forward(x, gamma, beta, running_mean, running_var, training, momentum, eps, save_mean,
                                  save_invstd, saved);
    if (residual.defined()) y = binary(ElementwiseBinary::add, y, residual);
    return unary(ElementwiseUnary::relu, y);
  }
  return bn_forward_entry(x, gamma, beta, running_mean, running_var, training, momentum, eps, save_mean, save_invstd,
                          saved, BnEpilogue{true, residual.defined() ? residual.detach().contiguous() : Tensor()});
}

BatchNormGradients batch_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& gamma,
                                       const Tensor& save_mean, const Tensor& save_invstd,
                                       const std::shared_ptr<void>& /*saved: none on the CPU*/, bool training,
                                       bool need_dx) {
  const DType ct = nn::compute_dtype(x.dtype());
  const BnSaved s = saved_of(gamma, save_mean, save_invstd, training, x.size(-1));
  Tensor xc = as_input(x, ct), gc = as_input(grad_out, ct);
  if (xc.dtype() != gc.dtype()) {  // e.g. bf16 x with an f32 gradient: both in the compute dtype
    xc = nn::to_compute(x, ct);
    gc = nn::to_compute(grad_out, ct);
  }
  std::vector<Tensor> g =
      nn::dispatch_compute(ct, [&](auto t) { return bn_backward<decltype(t)>(xc, gc, s, need_dx); });
  return {need_dx ? nn::from_compute(g[0], x.dtype()) : Tensor(), g[1], g[2], Tensor()};
}

// relu's backward on the fused output, then batch norm's: what the three ops' backwards compute.
BatchNormGradients batch_norm_relu_backward(const Tensor& grad_out, const Tensor& y, const Tensor& x,
                                            const Tensor& gamma, const Tensor& /*beta: not needed here*/,
                                            const Tensor& save_mean, const Tensor& save_invstd,
                                            const std::shared_ptr<void>& saved, bool training, bool need_dx,
                                            bool has_residual) {
  const DType ct = nn::compute_dtype(x.dtype());
  const auto direct = [&](const Tensor& t) {
    return t.dtype() == x.dtype() && (ct == DType::f64 ? rows_direct<double>(t) : rows_direct<float>(t));
  };
  if (!direct(x) || !direct(grad_out) || !direct(y)) {
    // f16, or mixed dtypes: relu_backward as its own kernel, then batch norm's backward
    Tensor g = binary(ElementwiseBinary::relu_backward, grad_out, y);
    BatchNormGradients out = batch_norm_backward(g, x, gamma, save_mean, save_invstd, saved, training, need_dx);
    if (has_residual) out.dresidual = g;
    return out;
  }
  const BnSaved s = saved_of(gamma, save_mean, save_invstd, training, x.size(-1));
  const Tensor xc = x.detach().contiguous(), gc = grad_out.detach().contiguous(), yc = y.detach().contiguous();
  std::vector<Tensor> g =
      nn::dispatch_compute(ct, [&](auto t) { return bn_backward<decltype(t)>(xc, gc, s, need_dx, yc); });
  return {need_dx ? g[0] : Tensor(), g[1], g[2], has_residual ? g[3] : Tensor()};
}

void increment_i64(const Tensor& counter, int64_t by) {
  KILN_CHECK(counter.dtype() == DType::i64 && counter.numel() == 1, "increment: expected one i64 value, got ",
             counter.str());
  *counter.data<int64_t>() += by;
}

}  // namespace kiln::cpu
