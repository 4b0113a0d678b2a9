// SiLU on the GPU (the kernels of core/ops/silu.h's slots; the op is core/ops/silu.cpp): PyTorch's
// formulas in f32, storage f32/f16/bf16, the packed elementwise loop of elementwise_util.cuh.
// Tests: tests/gpu/silu_test.cpp (against the CPU kernels).
#include "core/cuda/elementwise_util.cuh"
#include "core/cuda/kernel_util.cuh"
#include "core/ops/silu.h"

namespace kiln::cuda {
namespace {

struct SiluF {
  __device__ float operator()(float x) const { return x / (1.f + expf(-x)); }
};
struct SiluBackwardF {
  __device__ float operator()(float g, float x) const {
    const float s = 1.f / (1.f + expf(-x));
    return g * s * (1.f + x * (1.f - s));
  }
};

void check_float(const char* op, const Tensor& t) {
  KILN_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::f16 || t.dtype() == DType::bf16, op,
             ": needs an f32, f16 or bf16 tensor on CUDA, got ", t.str());
}

}  // namespace

Tensor silu_forward(const Tensor& x0) {
  const int device = same_device("silu", {&x0});
  check_float("silu", x0);
  Tensor x = packed(x0);
  Tensor y = empty_on(x.shape(), x.dtype(), x);
  if (y.numel() == 0) return y;
  DeviceGuard g(device);
  dispatch_float(x.dtype(), "silu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_flat<T>(device, x.numel(), static_cast<T*>(y.raw_data()), static_cast<const T*>(x.raw_data()), SiluF{});
  });
  return y;
}

Tensor silu_backward(const Tensor& grad_out, const Tensor& x0) {
  const int device = same_device("silu_backward", {&grad_out, &x0});
  check_float("silu_backward", grad_out);
  check_float("silu_backward", x0);
  KILN_CHECK(grad_out.shape() == x0.shape(), "silu: the gradient ", grad_out.str(), " and x ", x0.str(),
             " differ in shape");
  // Mixed dtypes meet in f32 (widening f16/bf16 is exact); the result has grad_out's dtype, as on the CPU.
  const bool mixed = grad_out.dtype() != x0.dtype();
  Tensor gy = packed(mixed ? grad_out.to(DType::f32) : grad_out), x = packed(mixed ? x0.to(DType::f32) : x0);
  Tensor dx = empty_on(x.shape(), x.dtype(), x);
  if (dx.numel() == 0) return mixed ? dx.to(grad_out.dtype()) : dx;
  DeviceGuard g(device);
  dispatch_float(x.dtype(), "silu_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_flat<T>(device, x.numel(), static_cast<T*>(dx.raw_data()), static_cast<const T*>(gy.raw_data()),
                   static_cast<const T*>(x.raw_data()), SiluBackwardF{});
  });
  return mixed ? dx.to(grad_out.dtype()) : dx;
}

}  // namespace kiln::cuda
