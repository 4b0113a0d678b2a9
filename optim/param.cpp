// Gradient utilities over a parameter list. Reductions accumulate in double, so the norm of a
// ResNet's 25M gradients does not depend on the summation order's rounding. On a GPU the norm is one
// multi-tensor sum-of-squares launch (f32 per block, f64 across blocks) and the clipping one
// multi-tensor scale (core/cuda/optim_cuda.cu).
#include "optim/param.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#ifdef KILN_WITH_CUDA
#include "core/cuda/cuda_ops.h"
#endif

namespace kiln {

int mark_no_decay_1d(std::vector<ParamRef>& params) {
  int n = 0;
  for (auto& p : params) {
    if (p.param.defined() && p.param.dim() == 1 && !p.no_decay) {
      p.no_decay = true;
      ++n;
    }
  }
  return n;
}

void zero_grad(const std::vector<ParamRef>& params) {
  for (const auto& p : params) {
    Tensor t = p.param;  // a handle: clears the shared parameter's grad
    t.zero_grad();
  }
}

void check_params(const std::vector<ParamRef>& params, const char* who) {
  std::set<std::string> seen;
  const ParamRef* first = nullptr;
  for (const auto& p : params) {
    KILN_CHECK(!p.name.empty(), who, ": a parameter has an empty name");
    KILN_CHECK(seen.insert(p.name).second, who, ": parameter name '", p.name, "' appears twice");
    KILN_CHECK(p.param.defined(), who, ": parameter '", p.name, "' is undefined");
    const Tensor& t = p.param;
    KILN_CHECK(t.dtype() == DType::f32, who, ": parameter '", p.name, "' is ", t.str(),
               "; optimizers update f32 master weights (keep low-precision copies outside the optimizer)");
    if (!first) first = &p;
    KILN_CHECK(t.device() == first->param.device(), who, ": parameters on different devices: '", first->name, "' is ",
               first->param.str(), " and '", p.name, "' is ", t.str(), "; move the model to one device first");
    KILN_CHECK(t.is_leaf(), who, ": parameter '", p.name, "' is not a leaf tensor (it has a grad_fn)");
    KILN_CHECK(t.is_contiguous(), who, ": parameter '", p.name, "' (", t.str(), ") is not contiguous");
  }
}

Tensor dense_grad(const ParamRef& p, const char* who) {
  Tensor g = p.param.grad();
  if (!g.defined()) return g;
  KILN_CHECK(g.shape() == p.param.shape(), who, ": gradient of '", p.name, "' is ", g.str(), ", parameter is ",
             p.param.str());
  KILN_CHECK(g.device() == p.param.device(), who, ": gradient of '", p.name, "' is ", g.str(), " but the parameter is ",
             p.param.str());
  if (g.dtype() != DType::f32 || !g.is_contiguous()) {
    g = g.detach().to(DType::f32).contiguous();
    Tensor t = p.param;
    t.set_grad(g);
  }
  return g;
}

namespace {
// The dense gradients of the parameters that have one, and whether they are on a GPU.
std::vector<Tensor> dense_grads(const std::vector<ParamRef>& params, const char* who, bool* on_gpu) {
  std::vector<Tensor> gs;
  for (const auto& p : params) {
    Tensor g = dense_grad(p, who);
    if (g.defined()) gs.push_back(g);
  }
  *on_gpu = !gs.empty() && gs[0].device().is_cuda();
  return gs;
}
}  // namespace

double grad_norm(const std::vector<ParamRef>& params, double norm_type) {
  bool inf_norm = std::isinf(norm_type) && norm_type > 0;
  KILN_CHECK(inf_norm || norm_type == 2.0, "grad_norm: norm_type ", norm_type, " is not supported; accepted: 2, inf");
  bool on_gpu = false;
  std::vector<Tensor> gs = dense_grads(params, "grad_norm", &on_gpu);
  if (on_gpu) {
#ifdef KILN_WITH_CUDA
    if (!inf_norm) return std::sqrt(cuda::sum_of_squares(gs));
    double m = 0;
    for (const Tensor& g : gs) {
      double a = cuda::max_abs(g);  // NaN propagates
      if (a != a) return a;
      m = std::max(m, a);
    }
    return m;
#endif
  }
  double acc = 0;
  for (const Tensor& g : gs) {
    const float* d = g.data<float>();
    int64_t n = g.numel();
    if (inf_norm) {
      float m = 0;
      int64_t nan = 0;
#pragma omp parallel for simd reduction(max : m) reduction(+ : nan) if (n > 65536)
      for (int64_t i = 0; i < n; ++i) {
        float a = std::fabs(d[i]);
        m = a > m ? a : m;
        nan += a != a;
      }
      if (nan) return std::numeric_limits<double>::quiet_NaN();
      acc = std::max(acc, static_cast<double>(m));
    } else {
      double s = 0;
#pragma omp parallel for simd reduction(+ : s) if (n > 65536)
      for (int64_t i = 0; i < n; ++i) s += static_cast<double>(d[i]) * d[i];
      acc += s;
    }
  }
  return inf_norm ? acc : std::sqrt(acc);
}

double clip_grad_norm(const std::vector<ParamRef>& params, double max_norm, double norm_type) {
  KILN_CHECK(max_norm > 0, "clip_grad_norm: max_norm must be > 0, got ", max_norm);
  double norm = grad_norm(params, norm_type);
  if (!std::isfinite(norm)) return norm;
  double coef = max_norm / (norm + 1e-6);
  if (coef >= 1.0) return norm;
  const float c = static_cast<float>(coef);
  bool on_gpu = false;
  std::vector<Tensor> gs = dense_grads(params, "clip_grad_norm", &on_gpu);
  if (on_gpu) {
#ifdef KILN_WITH_CUDA
    cuda::unscale_and_check_finite(gs, c);  // one launch: g *= float(coef); the norm was finite
    return norm;
#endif
  }
  for (const Tensor& g : gs) {
    float* d = g.data<float>();
    int64_t n = g.numel();
#pragma omp parallel for simd if (n > 65536)
    for (int64_t i = 0; i < n; ++i) d[i] *= c;
  }
  return norm;
}

}  // namespace kiln
