// Reductions, written once for every device: the checks and autograd here, the kernels from the
// device's kernel slots (reduce.h, core/optim_kernels.h; the CPU's sum in core/cpu/reduce.cpp, CUDA's in
// core/cuda/reduce_cuda.cu with f32 accumulation, deterministic two-pass). argmax and topk_indices
// rank on the host and return the indices on the input's device.
#include "core/ops/reduce.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/optim_kernels.h"

namespace kiln {
KILN_DEFINE_KERNEL_SLOT(sum);
}  // namespace kiln

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

Shape reduced_shape(const Shape& s, const std::vector<int64_t>& dims, bool keepdim) {
  Shape out;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) {
    bool r = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!r) out.push_back(s[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims0, bool keepdim) {
  KILN_CHECK(is_floating(x.dtype()), "sum: needs a floating tensor, got ", x.str());
  std::vector<int64_t> dims = normalize_dims(x, dims0);
  const Device d = op_device("sum", {x});
  Tensor out = sum_kernel.get(d, "sum")(x.detach(), dims, keepdim);
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

// The table's entries take f32 (gradients); f16/bf16 widen exactly, f64 and integers are summed on
// the host in double, as they always were.
double sum_of_squares(const Tensor& x) {
  const Device d = op_device("sum_of_squares", {x});
  if (x.dtype() == DType::f64 || !is_floating(x.dtype())) {
    double s = 0;
    for (double v : x.detach().to_double_vector()) s += v * v;
    return s;
  }
  Tensor xf = (x.dtype() == DType::f32 ? x.detach() : x.detach().to(DType::f32)).contiguous();
  return sum_of_squares_kernel.get(d, "sum_of_squares")({xf});
}

double max_abs(const Tensor& x) {
  const Device d = op_device("max_abs", {x});
  if (x.dtype() == DType::f64 || !is_floating(x.dtype())) {
    double m = 0;
    for (double v : x.detach().to_double_vector()) {
      if (v != v) return v;  // NaN propagates (std::max would drop it)
      m = std::max(m, std::fabs(v));
    }
    return m;
  }
  Tensor xf = (x.dtype() == DType::f32 ? x.detach() : x.detach().to(DType::f32)).contiguous();
  return max_abs_kernel.get(d, "max_abs")(xf);
}

}  // namespace kiln::ops
