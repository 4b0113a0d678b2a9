// GPU elementwise kernels against double-precision loops written here: broadcasting binary ops,
// unary ops, affine, relu backward, all_finite; f32/f16/bf16, packed and strided inputs.
#include <gtest/gtest.h>

#include "tests/gpu/gpu_test_util.h"

#ifdef KILN_WITH_CUDA
#include <functional>

#include "core/cuda/cuda_ops.h"

using namespace kiln;
using kiln::gputest::gpu;
using kiln::gputest::rand_cpu;

namespace {

// Reference broadcasting: out[i] = f(a[ia], b[ib]) over the broadcast shape.
std::vector<double> ref_binary(const Tensor& a, const Tensor& b, const Shape& out,
                               const std::function<double(double, double)>& f) {
  std::vector<double> va = a.to_double_vector(), vb = b.to_double_vector();
  size_t nd = out.size();
  auto index = [&](const Shape& s, const std::vector<int64_t>& idx) {
    int64_t k = 0;
    size_t off = nd - s.size();
    for (size_t d = 0; d < s.size(); ++d) k = k * s[d] + (s[d] == 1 ? 0 : idx[off + d]);
    return k;
  };
  std::vector<double> r(static_cast<size_t>(shape_numel(out)));
  std::vector<int64_t> idx(nd, 0);
  for (size_t i = 0; i < r.size(); ++i) {
    int64_t rem = static_cast<int64_t>(i);
    for (int64_t d = static_cast<int64_t>(nd) - 1; d >= 0; --d) {
      idx[d] = rem % out[d];
      rem /= out[d];
    }
    r[i] = f(va[index(a.shape(), idx)], vb[index(b.shape(), idx)]);
  }
  return r;
}

struct BinCase {
  Shape a, b, out;
};

}  // namespace

TEST(CudaElementwise, BinaryOpsBroadcast) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  std::vector<BinCase> cases = {{{2, 3, 4}, {2, 3, 4}, {2, 3, 4}}, {{2, 3, 4}, {4}, {2, 3, 4}},
                                {{2, 1, 4}, {3, 1}, {2, 3, 4}},    {{5}, {1}, {5}},
                                {{}, {3, 2}, {3, 2}},              {{4, 7, 9, 33}, {33}, {4, 7, 9, 33}},
                                {{3, 1, 1, 5}, {3, 4, 6, 5}, {3, 4, 6, 5}}, {{1001}, {1001}, {1001}}};
  struct Op {
    cuda::BinaryOp op;
    std::function<double(double, double)> f;
    const char* name;
  };
  std::vector<Op> ops = {{cuda::BinaryOp::add, [](double x, double y) { return x + y; }, "add"},
                         {cuda::BinaryOp::sub, [](double x, double y) { return x - y; }, "sub"},
                         {cuda::BinaryOp::mul, [](double x, double y) { return x * y; }, "mul"},
                         {cuda::BinaryOp::div, [](double x, double y) { return x / y; }, "div"}};
  for (DType t : {DType::f32, DType::f16, DType::bf16})
    for (const BinCase& c : cases)
      for (const Op& op : ops) {
        Tensor a = rand_cpu(c.a, 1, t), b = rand_cpu(c.b, 2, t, 1.0, op.op == cuda::BinaryOp::div ? 4.0 : 0.0);
        Tensor y = cuda::binary(op.op, a.to(gpu()), b.to(gpu()));
        ASSERT_EQ(y.shape(), c.out);
        ASSERT_EQ(y.dtype(), t);
        gputest::expect_near_all(y, ref_binary(a, b, c.out, op.f), 1e-6, 2 * gputest::rounding(t),
                                 std::string(op.name) + " " + dtype_name(t) + " " + shape_str(c.a) + " " + shape_str(c.b));
      }
}

TEST(CudaElementwise, BinaryOnStridedViewsAndErrors) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  Tensor a = rand_cpu({6, 5}, 3), b = rand_cpu({5, 6}, 4);
  Tensor y = cuda::binary(cuda::BinaryOp::mul, a.to(gpu()), b.to(gpu()).transpose(0, 1));
  gputest::expect_near_all(y, ref_binary(a, b.transpose(0, 1).contiguous(), {6, 5}, [](double x, double z) { return x * z; }),
                           1e-6, 1e-6, "mul with a transposed view");
  EXPECT_THROW(cuda::binary(cuda::BinaryOp::add, a.to(gpu()), rand_cpu({4}, 1).to(gpu())), Error);
  EXPECT_THROW(cuda::binary(cuda::BinaryOp::add, a.to(gpu()), a.to(DType::bf16).to(gpu())), Error);
  EXPECT_THROW(cuda::binary(cuda::BinaryOp::add, a.to(gpu()), a), Error);  // one on the CPU
  try {
    cuda::unary(cuda::UnaryOp::exp, Tensor::zeros({3}, DType::i32, gpu()));
    FAIL() << "no error for an i32 tensor";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exp"), std::string::npos) << e.what();
  }
}

TEST(CudaElementwise, UnaryAffineReluBackward) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  struct Op {
    cuda::UnaryOp op;
    std::function<double(double)> f;
    const char* name;
    bool positive;
  };
  std::vector<Op> ops = {{cuda::UnaryOp::neg, [](double x) { return -x; }, "neg", false},
                         {cuda::UnaryOp::relu, [](double x) { return x > 0 ? x : 0; }, "relu", false},
                         {cuda::UnaryOp::exp, [](double x) { return std::exp(x); }, "exp", false},
                         {cuda::UnaryOp::log, [](double x) { return std::log(x); }, "log", true},
                         {cuda::UnaryOp::sqrt, [](double x) { return std::sqrt(x); }, "sqrt", true},
                         {cuda::UnaryOp::square, [](double x) { return x * x; }, "square", false}};
  for (DType t : {DType::f32, DType::f16, DType::bf16})
    for (const Op& op : ops)
      for (const Shape& s : {Shape{7}, Shape{3, 129}, Shape{2, 5, 5, 3}}) {
        Tensor a = rand_cpu(s, 9, t, op.positive ? 0.3 : 1.0, op.positive ? 2.0 : 0.0);
        std::vector<double> want;
        for (double v : a.to_double_vector()) want.push_back(op.f(v));
        gputest::expect_near_all(cuda::unary(op.op, a.to(gpu())), want, 1e-6, 2 * gputest::rounding(t) + 2e-6,
                                 std::string(op.name) + " " + dtype_name(t));
      }
  Tensor a = rand_cpu({4, 9}, 11);
  std::vector<double> want;
  for (double v : a.to_double_vector()) want.push_back(static_cast<float>(v * 0.75 + 1.5));
  gputest::expect_near_all(cuda::affine(a.to(gpu()).transpose(0, 1), 0.75, 1.5).transpose(0, 1).contiguous(), want,
                           0, 0, "affine (f32, exact as the CPU)");
  Tensor g = rand_cpu({4, 9}, 12);
  Tensor y = cuda::unary(cuda::UnaryOp::relu, a.to(gpu()));
  std::vector<double> av = a.to_double_vector(), gv = g.to_double_vector(), wb;
  for (size_t i = 0; i < av.size(); ++i) wb.push_back(av[i] > 0 ? gv[i] : 0.0);
  gputest::expect_near_all(cuda::relu_backward(g.to(gpu()), y), wb, 0, 0, "relu_backward");
}

TEST(CudaElementwise, AllFinite) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    std::vector<double> v(100003, 1.0);
    EXPECT_TRUE(cuda::all_finite(Tensor::from_vector(v, {100003}, DType::f64).to(t).to(gpu())));
    for (double bad : {INFINITY, -INFINITY, NAN}) {
      v[77777] = bad;
      EXPECT_FALSE(cuda::all_finite(Tensor::from_vector(v, {100003}, DType::f64).to(t).to(gpu()))) << dtype_name(t);
      v[77777] = 1.0;
    }
  }
  EXPECT_TRUE(cuda::all_finite(Tensor::empty({0}, DType::f32, gpu())));
  // f16 overflows to inf: 70000 is not finite in f16.
  EXPECT_FALSE(cuda::all_finite(Tensor::full({3}, 70000.0, DType::f16, gpu())));
}

#endif  // KILN_WITH_CUDA
