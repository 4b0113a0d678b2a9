// Gradient utilities over a parameter list. The norm and the clipping call the device's kernels
// (core/optim_kernels.h): reductions accumulate in double (the CPU, core/cpu/grad_utils.cpp) or f32 per
// block and f64 across blocks (a GPU, one multi-tensor launch, core/cuda/optim_cuda.cu), so the norm
// of a ResNet's 25M gradients does not depend on the summation order's rounding.
#include "optim/param.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "core/device.h"  // reads_block
#include "core/optim_kernels.h"

namespace kiln {

std::vector<ParamRef> param_refs(const std::vector<Tensor>& params) {
  std::vector<ParamRef> out;
  out.reserve(params.size());
  for (size_t i = 0; i < params.size(); ++i) out.push_back({"params[" + std::to_string(i) + "]", params[i]});
  mark_no_decay_1d(out);
  return out;
}

std::vector<ParamRef> param_refs(const std::vector<std::pair<std::string, Tensor>>& named_params) {
  std::vector<ParamRef> out;
  out.reserve(named_params.size());
  for (const auto& [name, t] : named_params) out.push_back({name, t});
  mark_no_decay_1d(out);
  return out;
}

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
// The dense gradients of the parameters that have one, and their device (CPU when there are none).
std::vector<Tensor> dense_grads(const std::vector<ParamRef>& params, const char* who, Device* device) {
  std::vector<Tensor> gs;
  for (const auto& p : params) {
    Tensor g = dense_grad(p, who);
    if (g.defined()) gs.push_back(g);
  }
  *device = gs.empty() ? Device::cpu() : gs[0].device();
  return gs;
}
}  // namespace

double grad_norm(const std::vector<ParamRef>& params, double norm_type) {
  bool inf_norm = std::isinf(norm_type) && norm_type > 0;
  KILN_CHECK(inf_norm || norm_type == 2.0, "grad_norm: norm_type ", norm_type, " is not supported; accepted: 2, inf");
  Device d;
  std::vector<Tensor> gs = dense_grads(params, "grad_norm", &d);
  if (!inf_norm) return std::sqrt(sum_of_squares_kernel.get(d, "grad_norm")(gs));
  const auto max_abs = max_abs_kernel.get(d, "grad_norm");
  double m = 0;
  for (const Tensor& g : gs) {
    const double a = max_abs(g);  // NaN propagates
    if (a != a) return a;
    m = std::max(m, a);
  }
  return m;
}

void clip_grad_norm_on_device(const std::vector<ParamRef>& params, double max_norm) {
  KILN_CHECK(max_norm > 0, "clip_grad_norm: max_norm must be > 0, got ", max_norm);
  Device d;
  std::vector<Tensor> gs = dense_grads(params, "clip_grad_norm", &d);
  if (!reads_block(d)) {
    clip_grad_norm(params, max_norm);
    return;
  }
  clip_grad_norm_on_device_kernel.get(d, "clip_grad_norm")(gs, max_norm);
}

double clip_grad_norm(const std::vector<ParamRef>& params, double max_norm, double norm_type) {
  KILN_CHECK(max_norm > 0, "clip_grad_norm: max_norm must be > 0, got ", max_norm);
  double norm = grad_norm(params, norm_type);
  if (!std::isfinite(norm)) return norm;
  double coef = max_norm / (norm + 1e-6);
  if (coef >= 1.0) return norm;
  Device d;
  std::vector<Tensor> gs = dense_grads(params, "clip_grad_norm", &d);
  // g *= float(coef), one pass per gradient (one launch for all on a GPU); the norm was finite.
  scale_and_check_finite_kernel.get(d, "clip_grad_norm")(gs, coef);
  return norm;
}

}  // namespace kiln
