// Reductions on the GPU: sum/mean over any dims, sum of squares, max |x|. The input is viewed as
// (A, R, B) — kept dims before, reduced dims, kept dims after — which covers the shapes training
// needs directly (bias gradient of NHWC: A=1, R=N*H*W, B=C; per-row sums: B=1); other dim sets
// are first packed with the reduced dims moved last. f32 accumulation in blocks, f64 across blocks.
// Tests: tests/gpu/reduce_test.cpp.
#include <algorithm>
#include <array>
#include <numeric>

#include "core/cuda/cuda_ops.h"
#include "core/cuda/kernel_util.cuh"
#include "core/cuda/reduce_util.cuh"

namespace kiln::cuda {
namespace {

enum class Transform { identity, square, abs };

template <typename T, Transform X>
struct LoadArb {
  const T* x;
  int64_t R, B;
  __device__ Vals<1> operator()(int64_t a, int64_t r, int64_t b) const {
    float v = to_float(x[(a * R + r) * B + b]);
    if constexpr (X == Transform::square) v = v * v;
    if constexpr (X == Transform::abs) v = fabsf(v);
    return {{v}};
  }
};

template <typename T>
struct StoreScaled {
  T* out;
  int64_t B;
  double scale;
  __device__ void operator()(int64_t a, int64_t b, const double* v) const {
    out[a * B + b] = from_float<T>(static_cast<float>(v[0] * scale));
  }
};

std::vector<int64_t> normalize_dims(const Tensor& x, const std::vector<int64_t>& dims) {
  std::vector<int64_t> out;
  for (int64_t d : dims) {
    int64_t nd = d < 0 ? d + x.dim() : d;
    KILN_CHECK(nd >= 0 && nd < x.dim(), "sum: dim ", d, " out of range for tensor ", x.str());
    if (std::find(out.begin(), out.end(), nd) == out.end()) out.push_back(nd);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// x packed; returns {A, R, B} and maybe a permuted packed copy of x in `x`.
std::array<int64_t, 3> arb_view(Tensor& x, const std::vector<int64_t>& dims) {
  int64_t nd = x.dim();
  std::vector<bool> red(nd, false);
  for (int64_t d : dims) red[d] = true;
  // Groups of non-trivial dims; a reduced group between kept groups means one (A, R, B) view.
  int64_t first = -1, last = -1;
  for (int64_t d = 0; d < nd; ++d)
    if (red[d] && x.shape()[d] != 1) {
      if (first < 0) first = d;
      last = d;
    }
  bool one_block = true;
  for (int64_t d = first; first >= 0 && d <= last; ++d) one_block = one_block && (red[d] || x.shape()[d] == 1);
  if (!one_block) {  // move every reduced dim last, then (A, R, 1)
    std::vector<int64_t> perm;
    for (int64_t d = 0; d < nd; ++d)
      if (!red[d]) perm.push_back(d);
    for (int64_t d = 0; d < nd; ++d)
      if (red[d]) perm.push_back(d);
    Shape ps(nd), pst(nd);
    for (int64_t i = 0; i < nd; ++i) {
      ps[i] = x.shape()[perm[i]];
      pst[i] = x.strides()[perm[i]];
    }
    x = packed(make_view(x, ps, pst, x.offset()));
    int64_t A = 1, R = 1;
    for (int64_t i = 0; i < nd; ++i) (i < nd - static_cast<int64_t>(dims.size()) ? A : R) *= ps[i];
    return {A, R, 1};
  }
  int64_t A = 1, R = 1, B = 1;
  for (int64_t d = 0; d < nd; ++d) {
    int64_t s = x.shape()[d];
    if (first < 0 || d < first) A *= s;
    else if (d <= last) R *= red[d] ? s : 1;
    else B *= s;
  }
  if (first < 0) R = 1;
  return {A, R, B};
}

template <Transform X, typename C>
double reduce_all(const char* op, const Tensor& x0) {
  int device = same_device(op, {&x0});
  Tensor x = packed(x0);
  Tensor out = Tensor::empty({}, DType::f64, x.device());
  DeviceGuard g(device);
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    reduce_arb<1, C>(device, 1, x.numel(), 1, LoadArb<T, X>{static_cast<const T*>(x.raw_data()), x.numel(), 1},
                     StoreF64{static_cast<double*>(out.raw_data())});
  });
  return out.item();
}

Tensor sum_scaled(const char* op, const Tensor& x0, const std::vector<int64_t>& dims0, bool keepdim, bool mean) {
  int device = same_device(op, {&x0});
  std::vector<int64_t> dims = normalize_dims(x0, dims0);
  Shape out_shape;
  int64_t count = 1;
  for (int64_t d = 0; d < x0.dim(); ++d) {
    bool r = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (r) count *= x0.shape()[d];
    if (!r) out_shape.push_back(x0.shape()[d]);
    else if (keepdim) out_shape.push_back(1);
  }
  KILN_CHECK(!mean || count > 0, op, ": mean over an empty dimension of ", x0.str());
  Tensor x = packed(x0);
  Tensor out = empty_on(out_shape, x.dtype(), x);
  if (out.numel() == 0) return out;
  auto [A, R, B] = arb_view(x, dims);
  DeviceGuard g(device);
  double scale = mean ? 1.0 / static_cast<double>(count) : 1.0;
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    reduce_arb<1, SumCombine>(device, A, R, B, LoadArb<T, Transform::identity>{static_cast<const T*>(x.raw_data()), R, B},
                              StoreScaled<T>{static_cast<T*>(out.raw_data()), B, scale});
  });
  return out;
}

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return sum_scaled("sum", x, dims, keepdim, false);
}
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return sum_scaled("mean", x, dims, keepdim, true);
}
double sum_of_squares(const Tensor& x) { return reduce_all<Transform::square, SumCombine>("sum_of_squares", x); }
double max_abs(const Tensor& x) {
  if (x.numel() == 0) return 0.0;
  return reduce_all<Transform::abs, MaxCombine>("max_abs", x);
}

}  // namespace kiln::cuda
