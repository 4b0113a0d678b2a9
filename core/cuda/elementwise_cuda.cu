// Elementwise kernels: binary ops with NumPy broadcasting, unary ops, a*x+b, relu backward and the
// inf/NaN check, and the two registered kernels over them (elementwise_binary, elementwise_unary).
// Math in f32 (the scalar affine in f64, as the CPU does), storage f32/f16/bf16.
// Packed operands of one shape take a vectorised path (16-byte loads); broadcasting goes through
// OffsetCalc (a bias over the last dim costs one division per element). Tests:
// tests/gpu/elementwise_test.cpp.
#include "core/cuda/cuda_ops.h"
#include "core/cuda/elementwise_util.cuh"
#include "core/cuda/kernel_util.cuh"
#include "core/ops/elementwise.h"

namespace kiln::cuda {
namespace {

struct AddF { __device__ float operator()(float a, float b) const { return a + b; } };
struct SubF { __device__ float operator()(float a, float b) const { return a - b; } };
struct MulF { __device__ float operator()(float a, float b) const { return a * b; } };
struct DivF { __device__ float operator()(float a, float b) const { return a / b; } };
// NaN propagates as in PyTorch: relu(NaN) = NaN, and a NaN output passes its gradient.
struct ReluBackwardF { __device__ float operator()(float g, float y) const { return y <= 0.f ? 0.f : g; } };

struct NegF { __device__ float operator()(float x) const { return -x; } };
struct ReluF { __device__ float operator()(float x) const { return (x > 0.f || x != x) ? x : 0.f; } };
struct ExpF { __device__ float operator()(float x) const { return expf(x); } };
struct LogF { __device__ float operator()(float x) const { return logf(x); } };
struct SqrtF { __device__ float operator()(float x) const { return sqrtf(x); } };
struct SquareF { __device__ float operator()(float x) const { return x * x; } };
struct AffineF {
  double mul, add;
  __device__ float operator()(float x) const { return static_cast<float>(static_cast<double>(x) * mul + add); }
};

template <typename T, typename F, typename Index>
__global__ void broadcast_kernel(T* out, const T* a, const T* b, OffsetCalc<2> oc, Index n, F f) {
  for (Index i = blockIdx.x * Index(blockDim.x) + threadIdx.x; i < n; i += Index(gridDim.x) * blockDim.x) {
    Index off[2];
    oc.get(i, off);
    out[i] = from_float<T>(f(to_float(a[off[0]]), to_float(b[off[1]])));
  }
}

void check_floating(const char* op, const Tensor& t) {
  KILN_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::f16 || t.dtype() == DType::bf16, op,
             ": needs an f32, f16 or bf16 tensor on CUDA, got ", t.str());
}

template <typename F>
Tensor binary_impl(const char* op, const Tensor& a, const Tensor& b, F f) {
  int device = same_device(op, {&a, &b});
  check_floating(op, a);
  KILN_CHECK(a.dtype() == b.dtype(), op, ": dtype mismatch: ", a.str(), " and ", b.str());
  Shape shape = ops::broadcast_shapes(a.shape(), b.shape());
  Tensor out = empty_on(shape, a.dtype(), a);
  int64_t n = out.numel();
  if (n == 0) return out;
  DeviceGuard g(device);
  cudaStream_t s = stream_of(device);
  dispatch_float(a.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = static_cast<T*>(out.raw_data());
    const T* pa = static_cast<const T*>(a.raw_data());
    const T* pb = static_cast<const T*>(b.raw_data());
    if (a.shape() == shape && b.shape() == shape && a.is_contiguous() && b.is_contiguous()) {
      launch_flat<T>(device, n, o, pa, pb, f);
      return;
    }
    auto oc = make_offset_calc<2>(shape, {broadcast_strides(a, shape), broadcast_strides(b, shape)});
    constexpr int kThreads = 256;
    int grid = grid_for(device, n, kThreads);
    if (fits_u32(oc, n)) broadcast_kernel<T, F, uint32_t><<<grid, kThreads, 0, s>>>(o, pa, pb, oc, uint32_t(n), f);
    else broadcast_kernel<T, F, int64_t><<<grid, kThreads, 0, s>>>(o, pa, pb, oc, n, f);
    CUDA_CHECK_LAUNCH();
  });
  return out;
}

template <typename F>
Tensor unary_impl(const char* op, const Tensor& a0, F f) {
  int device = same_device(op, {&a0});
  check_floating(op, a0);
  Tensor a = packed(a0);
  Tensor out = empty_on(a.shape(), a.dtype(), a);
  if (out.numel() == 0) return out;
  DeviceGuard g(device);
  dispatch_float(a.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_flat<T>(device, a.numel(), static_cast<T*>(out.raw_data()), static_cast<const T*>(a.raw_data()), f);
  });
  return out;
}

template <typename T>
__global__ void nonfinite_kernel(const T* x, int64_t n, int32_t* flag) {
  bool bad = false;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    bad |= !isfinite(to_float(x[i]));
  if (__syncthreads_or(bad) && threadIdx.x == 0) *flag = 1;
}

}  // namespace

Shape broadcast_strides(const Tensor& t, const Shape& shape) {
  size_t n = shape.size(), k = t.shape().size();
  Shape st(n, 0);
  for (size_t i = 0; i < k; ++i) st[n - k + i] = t.shape()[i] == 1 ? 0 : t.strides()[i];
  return st;
}

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  switch (op) {
    case BinaryOp::add: return binary_impl("add", a, b, AddF{});
    case BinaryOp::sub: return binary_impl("sub", a, b, SubF{});
    case BinaryOp::mul: return binary_impl("mul", a, b, MulF{});
    case BinaryOp::div: return binary_impl("div", a, b, DivF{});
  }
  KILN_FAIL("binary: unknown op");
}

Tensor relu_backward(const Tensor& grad_out, const Tensor& out) {
  KILN_CHECK(grad_out.shape() == out.shape(), "relu_backward: gradient ", grad_out.str(), " for output ", out.str());
  return binary_impl("relu_backward", grad_out, out, ReluBackwardF{});
}

Tensor unary(UnaryOp op, const Tensor& a) {
  switch (op) {
    case UnaryOp::neg: return unary_impl("neg", a, NegF{});
    case UnaryOp::relu: return unary_impl("relu", a, ReluF{});
    case UnaryOp::exp: return unary_impl("exp", a, ExpF{});
    case UnaryOp::log: return unary_impl("log", a, LogF{});
    case UnaryOp::sqrt: return unary_impl("sqrt", a, SqrtF{});
    case UnaryOp::square: return unary_impl("square", a, SquareF{});
  }
  KILN_FAIL("unary: unknown op");
}

Tensor affine(const Tensor& a, double mul, double add) { return unary_impl("affine", a, AffineF{mul, add}); }

// --- the kernels of core/ops/elementwise.h's slots (registered in kernels_cuda.cu) --------------------
Tensor elementwise_binary(ElementwiseBinary op, const Tensor& a, const Tensor& b) {
  switch (op) {
    case ElementwiseBinary::add: return binary(BinaryOp::add, a, b);
    case ElementwiseBinary::sub: return binary(BinaryOp::sub, a, b);
    case ElementwiseBinary::mul: return binary(BinaryOp::mul, a, b);
    case ElementwiseBinary::div: return binary(BinaryOp::div, a, b);
    case ElementwiseBinary::relu_backward: return relu_backward(a, b);
  }
  KILN_FAIL("elementwise: unknown binary op");
}

Tensor elementwise_unary(ElementwiseUnary op, const Tensor& a) {
  switch (op) {
    case ElementwiseUnary::relu: return unary(UnaryOp::relu, a);
    case ElementwiseUnary::exp: return unary(UnaryOp::exp, a);
    case ElementwiseUnary::log: return unary(UnaryOp::log, a);
    case ElementwiseUnary::sqrt: return unary(UnaryOp::sqrt, a);
    case ElementwiseUnary::square: return unary(UnaryOp::square, a);
  }
  KILN_FAIL("elementwise: unknown unary op");
}

bool all_finite(const Tensor& a0) {
  int device = same_device("all_finite", {&a0});
  check_floating("all_finite", a0);
  Tensor a = packed(a0);
  if (a.numel() == 0) return true;
  Tensor flag = Tensor::zeros({}, DType::i32, a.device());
  DeviceGuard g(device);
  cudaStream_t s = stream_of(device);
  constexpr int kThreads = 256;
  int grid = grid_for(device, a.numel(), kThreads);
  dispatch_float(a.dtype(), "all_finite", [&](auto tag) {
    using T = typename decltype(tag)::type;
    nonfinite_kernel<T><<<grid, kThreads, 0, s>>>(static_cast<const T*>(a.raw_data()), a.numel(),
                                                   static_cast<int32_t*>(flag.raw_data()));
  });
  CUDA_CHECK_LAUNCH();
  return read_i32(flag) == 0;
}

}  // namespace kiln::cuda
