// ops::silu on the CPU (core/ops/silu.h): values against a double-precision reference, f16/bf16
// rounded once from f32, PyTorch's values at the extremes, the gradient (formula and finite
// differences), and the kernel slots (core/kernel_slot.h): registration, lookup and
// the error for a missing kernel.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/device.h"
#include "core/kernel_slot.h"
#include "core/ops/elementwise.h"
#include "core/ops/silu.h"
#include "tests/expect_error.h"
#include "tests/gradcheck.h"

using namespace kiln;
using kiln::testing::expect_error;
using kiln::testing::randn;

namespace {
double silu_ref(double x) { return x / (1.0 + std::exp(-x)); }
double silu_grad_ref(double x) {
  const double s = 1.0 / (1.0 + std::exp(-x));
  return s * (1.0 + x * (1.0 - s));
}
}  // namespace

TEST(Silu, ValuesAndGradientMatchTheReference) {
  for (const Shape& shape : {Shape{7}, Shape{2, 5, 3, 4}, Shape{1, 1, 1, 1}, Shape{3, 40000}}) {
    Tensor x = randn(shape, 3, DType::f32, 3.0);
    x.set_requires_grad(true);
    Tensor y = ops::silu(x);
    std::vector<double> xv = x.to_double_vector(), want, gwant;
    for (double v : xv) want.push_back(silu_ref(v)), gwant.push_back(silu_grad_ref(v));
    kiln::testing::expect_close(y, want, 1e-6, 1e-6, "silu forward " + shape_str(shape));
    y.backward(Tensor::ones(shape));
    kiln::testing::expect_close(x.grad(), gwant, 1e-6, 1e-6, "silu backward " + shape_str(shape));
  }
}

TEST(Silu, FiniteDifferencesInF64) {
  Tensor x = randn({3, 4, 5}, 9, DType::f64, 2.0);
  x.set_requires_grad(true);
  kiln::testing::gradcheck([](const std::vector<Tensor>& v) { return ops::silu(v[0]); }, {x}, "silu");
}

TEST(Silu, HalfPrecisionIsRoundedOnceFromF32) {
  Tensor x = randn({257}, 5, DType::f32, 4.0);
  for (DType t : {DType::bf16, DType::f16}) {
    Tensor xt = x.to(t);
    Tensor y = ops::silu(xt);
    EXPECT_EQ(y.dtype(), t);
    // The f32 result of the rounded input, rounded once to t: bit for bit.
    EXPECT_EQ(y.to_double_vector(), ops::silu(xt.to(DType::f32)).to(t).to_double_vector()) << dtype_name(t);
  }
}

TEST(Silu, ExtremesAreThoseOfPyTorch) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = Tensor::from_vector(std::vector<float>{inf, -100.f, 0.f, 100.f, nan, -inf}, {6});
  x.set_requires_grad(true);
  std::vector<double> y = ops::silu(x).to_double_vector();
  EXPECT_EQ(y[0], inf);
  EXPECT_EQ(y[1], 0.0);  // -100 / (1 + e^100): e^100 overflows f32 to inf, -100/inf = -0
  EXPECT_EQ(y[2], 0.0);
  EXPECT_EQ(y[3], 100.0);
  EXPECT_TRUE(std::isnan(y[4]));
  EXPECT_TRUE(std::isnan(y[5]));  // -inf / inf, as torch.nn.functional.silu
  ops::silu(x).backward(Tensor::ones({6}));
  std::vector<double> g = x.grad().to_double_vector();
  EXPECT_EQ(g[2], 0.5);
  EXPECT_EQ(g[3], 1.0);
  EXPECT_EQ(g[1], 0.0);
}


TEST(KernelSlot, RegisteredKernelsAndMissingOnes) {
  // cpu::register_kernels filled silu's slots (on the first lookup); the op runs what get() returns.
  const auto forward = silu_forward_kernel.get(Device::cpu(), "silu");
  ASSERT_NE(forward, nullptr);
  EXPECT_EQ(silu_forward_kernel.find(Device::cpu()), forward);
  Tensor x = randn({2, 3}, 4);
  EXPECT_EQ(forward(x).to_double_vector(), ops::silu(x).to_double_vector());
  EXPECT_STREQ(silu_forward_kernel.name(), "silu_forward");
  // A kernel the CPU does not have: an error naming the op and the device, never a fallback.
  EXPECT_EQ(memory_info_kernel.find(Device::cpu()), nullptr);
  expect_error([] { memory_info_kernel.get(Device::cpu(), "memory_info"); }, {"memory_info: no cpu kernel"});
  expect_error([] { memory_info_kernel.get(Device::cpu()); }, {"memory_info: no cpu kernel"});  // the slot's name
  if (!cuda_compiled())
    expect_error([] { silu_forward_kernel.get(Device::cuda(0), "silu"); },
                 {"silu: device cuda:0 is not available: kiln was built without CUDA"});
  else
    EXPECT_NE(silu_forward_kernel.find(Device::cuda(0)), nullptr);  // cuda::register_kernels filled it
}

namespace {
Tensor twice(const Tensor& x) { return ops::mul_scalar(x, 2.0); }
}  // namespace

TEST(KernelSlot, OneKernelPerDeviceTypeAndTheErrorOfAMissingOne) {
  KernelSlot<Tensor (*)(const Tensor&)> slot("probe");
  expect_error([&] { slot.get(Device::cpu(), "probe_op"); }, {"probe_op: no cpu kernel"});
  slot.set(DeviceType::CPU, twice);
  EXPECT_EQ(slot.get(Device::cpu()), &twice);
  EXPECT_EQ(slot.find(Device::cpu()), &twice);
  if (cuda_compiled()) {
    // The CPU's kernel is never used for a GPU.
    EXPECT_EQ(slot.find(Device::cuda(0)), nullptr);
    expect_error([&] { slot.get(Device::cuda(0), "probe_op"); }, {"probe_op: no cuda kernel"});
    slot.set(DeviceType::CUDA, twice);
    EXPECT_EQ(slot.get(Device::cuda(1)), &twice);
  } else {
    expect_error([&] { slot.get(Device::cuda(0)); },
                 {"probe: device cuda:0 is not available: kiln was built without CUDA"});
  }
}
