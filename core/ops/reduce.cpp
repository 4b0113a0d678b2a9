// Reductions. CPU: fast paths for the two shapes training needs (reduce a leading block of dims, as
// in bias gradients over N*H*W; reduce a trailing block, as in per-row sums), a general path
// otherwise; accumulation in double, so sums over millions of f32 values stay accurate. CUDA
// tensors: core/cuda/reduce_cuda.cu (f32 accumulation, deterministic two-pass). argmax and
// topk_indices rank on the host and return the indices on the input's device.
#include "core/ops/reduce.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <omp.h>

#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"

#ifdef KILN_WITH_CUDA
#include "core/cuda/cuda_ops.h"
#endif

namespace kiln::ops {

namespace {

std::vector<int64_t> normalize_dims(const Tensor& x, const std::vector<int64_t>& dims) {
  std::vector<int64_t> out;
  for (int64_t d : dims) {
    int64_t nd = d < 0 ? d + x.dim() : d;
    KILN_CHECK(nd >= 0 && nd < x.dim(), "reduction over dim ", d, " of tensor ", x.str());
    if (std::find(out.begin(), out.end(), nd) == out.end()) out.push_back(nd);
  }
  std::sort(out.begin(), out.end());
  return out;
}

template <typename T>
void sum_kernel(const T* in, const Shape& shape, const std::vector<int64_t>& dims, T* out) {
  int64_t nd = static_cast<int64_t>(shape.size());
  int64_t n = shape_numel(shape);
  std::vector<bool> red(nd, false);
  for (int64_t d : dims) red[d] = true;
  // Leading block [0, k) reduced, the rest kept: column sums.
  int64_t k = 0;
  while (k < nd && red[k]) ++k;
  bool leading = true, trailing = true;
  for (int64_t d = k; d < nd; ++d) leading = leading && !red[d];
  int64_t j = nd;
  while (j > 0 && red[j - 1]) --j;
  for (int64_t d = 0; d < j; ++d) trailing = trailing && !red[d];
  if (leading) {
    int64_t rows = 1;
    for (int64_t d = 0; d < k; ++d) rows *= shape[d];
    int64_t cols = rows ? n / std::max<int64_t>(rows, 1) : 0;
    if (rows == 0) {
      std::fill(out, out + shape_numel(Shape(shape.begin() + k, shape.end())), T(0));
      return;
    }
    // Each thread sums a fixed block of rows; the blocks are then added in order, so the result
    // does not depend on thread timing (resume and data-parallel tests compare bit for bit).
    int nt = omp_get_max_threads();
    if (n <= 65536) nt = 1;
    std::vector<double> part(static_cast<size_t>(nt) * cols, 0.0);
#pragma omp parallel num_threads(nt)
    {
      int t = omp_get_thread_num();
      int64_t lo = rows * t / nt, hi = rows * (t + 1) / nt;
      double* local = part.data() + static_cast<size_t>(t) * cols;
      for (int64_t r = lo; r < hi; ++r) {
        const T* row = in + r * cols;
        for (int64_t c = 0; c < cols; ++c) local[c] += row[c];
      }
    }
    std::vector<double> acc(static_cast<size_t>(cols), 0.0);
    for (int t = 0; t < nt; ++t)
      for (int64_t c = 0; c < cols; ++c) acc[c] += part[static_cast<size_t>(t) * cols + c];
    for (int64_t c = 0; c < cols; ++c) out[c] = static_cast<T>(acc[c]);
    return;
  }
  if (trailing) {
    int64_t inner = 1;
    for (int64_t d = j; d < nd; ++d) inner *= shape[d];
    int64_t rows = inner ? n / inner : shape_numel(Shape(shape.begin(), shape.begin() + j));
#pragma omp parallel for if (n > 65536)
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0;
      const T* row = in + r * inner;
      for (int64_t i = 0; i < inner; ++i) s += row[i];
      out[r] = static_cast<T>(s);
    }
    return;
  }
  // General: out index from the kept dims.
  Shape out_shape;
  for (int64_t d = 0; d < nd; ++d)
    if (!red[d]) out_shape.push_back(shape[d]);
  Shape ost = contiguous_strides(out_shape);
  Shape st(nd, 0);
  for (int64_t d = 0, o = 0; d < nd; ++d)
    if (!red[d]) st[d] = ost[o++];
  std::vector<double> acc(static_cast<size_t>(shape_numel(out_shape)), 0.0);
  std::vector<int64_t> idx(nd, 0);
  int64_t oi = 0;
  for (int64_t i = 0; i < n; ++i) {
    acc[oi] += in[i];
    for (int64_t d = nd - 1; d >= 0; --d) {
      ++idx[d];
      oi += st[d];
      if (idx[d] < shape[d]) break;
      oi -= st[d] * shape[d];
      idx[d] = 0;
    }
  }
  for (size_t i = 0; i < acc.size(); ++i) out[i] = static_cast<T>(acc[i]);
}

Shape reduced_shape(const Shape& s, const std::vector<int64_t>& dims, bool keepdim) {
  Shape out;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) {
    bool r = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!r) out.push_back(s[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

// g broadcast back to `shape` (g has the keepdim shape's element count).
Tensor expand_to(const Tensor& g, const Shape& in_shape, const std::vector<int64_t>& dims) {
  Shape keep = reduced_shape(in_shape, dims, true);
  Tensor gk = g.reshape(keep).contiguous();
  Shape st = contiguous_strides(keep);
  for (size_t d = 0; d < keep.size(); ++d)
    if (keep[d] == 1) st[d] = 0;
  return make_view(gk, in_shape, st, gk.offset()).contiguous();
}

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims0, bool keepdim) {
  KILN_CHECK(is_floating(x.dtype()), "sum: needs a floating tensor, got ", x.str());
  std::vector<int64_t> dims = normalize_dims(x, dims0);
  Tensor out;
  if (op_on_cuda("sum", {x})) {
#ifdef KILN_WITH_CUDA
    out = cuda::sum(x.detach(), dims, keepdim);
#endif
  } else {
    DType ct = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
    Tensor xc = (x.dtype() == ct ? x.detach() : x.detach().to(ct)).contiguous();
    out = Tensor::empty(reduced_shape(x.shape(), dims, keepdim), ct);
    if (ct == DType::f64) sum_kernel(xc.data<double>(), xc.shape(), dims, out.data<double>());
    else sum_kernel(xc.data<float>(), xc.shape(), dims, out.data<float>());
    if (ct != x.dtype()) out = out.to(x.dtype());
  }
  Shape in_shape = x.shape();
  return record("sum", {x}, out, [in_shape, dims](const Tensor& g) { return grads{expand_to(g, in_shape, dims)}; });
}

Tensor sum(const Tensor& x) {
  std::vector<int64_t> all(x.dim());
  std::iota(all.begin(), all.end(), 0);
  return sum(x, all, false);
}

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims0, bool keepdim) {
  std::vector<int64_t> dims = normalize_dims(x, dims0);
  int64_t count = 1;
  for (int64_t d : dims) count *= x.shape()[d];
  KILN_CHECK(count > 0, "mean over an empty dimension of ", x.str());
  return mul_scalar(sum(x, dims, keepdim), 1.0 / static_cast<double>(count));
}

Tensor mean(const Tensor& x) {
  std::vector<int64_t> all(x.dim());
  std::iota(all.begin(), all.end(), 0);
  return mean(x, all, false);
}

Tensor argmax(const Tensor& x, int64_t dim) {
  if (dim < 0) dim += x.dim();
  KILN_CHECK(dim >= 0 && dim < x.dim(), "argmax over dim ", dim, " of ", x.str());
  Tensor xc = x.detach().to(Device::cpu()).to(DType::f64).contiguous();
  Shape s = x.shape();
  int64_t outer = 1, inner = 1, len = s[dim];
  for (int64_t d = 0; d < dim; ++d) outer *= s[d];
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= s[d];
  Shape os = s;
  os.erase(os.begin() + dim);
  Tensor out = Tensor::empty(os, DType::i64);
  const double* p = xc.data<double>();
  int64_t* o = out.data<int64_t>();
  for (int64_t a = 0; a < outer; ++a)
    for (int64_t b = 0; b < inner; ++b) {
      // NaN is the maximum (the first NaN wins), as in PyTorch.
      int64_t best = 0;
      for (int64_t i = 1; i < len; ++i) {
        double v = p[(a * len + i) * inner + b], m = p[(a * len + best) * inner + b];
        if (m == m && (v > m || v != v)) best = i;
      }
      o[a * inner + b] = best;
    }
  return out.to(x.device());
}

Tensor topk_indices(const Tensor& x, int64_t k) {
  KILN_CHECK(x.dim() == 2, "topk_indices needs (N, K) scores, got ", x.str());
  int64_t n = x.size(0), c = x.size(1);
  k = std::min(k, c);
  Tensor xc = x.detach().to(Device::cpu()).to(DType::f64).contiguous();
  const double* p = xc.data<double>();
  Tensor out = Tensor::empty({n, k}, DType::i64);
  int64_t* o = out.data<int64_t>();
  std::vector<int64_t> idx(c);
  for (int64_t r = 0; r < n; ++r) {
    std::iota(idx.begin(), idx.end(), 0);
    const double* row = p + r * c;
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [row](int64_t a, int64_t b) {
      // NaN ranks above every number (PyTorch's topk); ties and NaNs by index.
      bool na = row[a] != row[a], nb = row[b] != row[b];
      if (na || nb) return na && (!nb || a < b);
      return row[a] > row[b] || (row[a] == row[b] && a < b);
    });
    std::copy(idx.begin(), idx.begin() + k, o + r * k);
  }
  return out.to(x.device());
}

double sum_of_squares(const Tensor& x) {
  if (op_on_cuda("sum_of_squares", {x})) {
#ifdef KILN_WITH_CUDA
    return cuda::sum_of_squares(x.detach());
#endif
  }
  Tensor xc = x.detach().contiguous();
  int64_t n = xc.numel();
  double s = 0;
  if (xc.dtype() == DType::f32) {
    const float* p = xc.data<float>();
#pragma omp parallel for reduction(+ : s) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(p[i]) * p[i];
    return s;
  }
  for (double v : xc.to_double_vector()) s += v * v;
  return s;
}

double max_abs(const Tensor& x) {
  if (op_on_cuda("max_abs", {x})) {
#ifdef KILN_WITH_CUDA
    return cuda::max_abs(x.detach());
#endif
  }
  double m = 0;
  for (double v : x.to_double_vector()) {
    if (v != v) return v;  // NaN propagates (std::max would drop it)
    m = std::max(m, std::fabs(v));
  }
  return m;
}

}  // namespace kiln::ops
