// Reductions on the CPU (the kernels of core/ops/reduce.h's slots; the ops, their checks and autograd
// are core/ops/reduce.cpp): the sum over dims. Fast paths for the two shapes training needs (reduce
// a leading block of dims, as in bias gradients over N*H*W; reduce a trailing block, as in per-row
// sums), a general path otherwise; accumulation in double, so sums over millions of f32 values stay
// accurate, and in a fixed order, so results do not depend on thread timing. (Sum of squares and
// max |x| are core/cpu/grad_utils.cpp's.)
// Tests: tests/core/autograd_test.cpp, tests/core/nan_test.cpp.
#include <algorithm>
#include <omp.h>

#include "core/ops/reduce.h"

namespace kiln::cpu {

namespace {

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

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  DType ct = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor xc = (x.dtype() == ct ? x : x.to(ct)).contiguous();
  Tensor out = Tensor::empty(ops::reduced_shape(x.shape(), dims, keepdim), ct);
  if (ct == DType::f64) sum_kernel(xc.data<double>(), xc.shape(), dims, out.data<double>());
  else sum_kernel(xc.data<float>(), xc.shape(), dims, out.data<float>());
  return ct == x.dtype() ? out : out.to(x.dtype());
}

}  // namespace kiln::cpu
