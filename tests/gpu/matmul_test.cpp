// cuBLASLt matmul against a double-precision triple loop: every transpose combination, odd sizes,
// bias, transposed and sliced views as operands, f32 (exact FMA path and TF32), f16, bf16, and the
// three products of a Linear layer's forward and backward, and tiny/odd problems on each fallback path.
#include <gtest/gtest.h>

#include "tests/gpu/gpu_test_util.h"

#ifdef KILN_WITH_CUDA
#include "core/cuda/cuda_ops.h"

using namespace kiln;
using kiln::gputest::gpu;
using kiln::gputest::rand_cpu;

namespace {

// op(a) (M, K) x op(b) (K, N) + bias.
std::vector<double> ref_matmul(const Tensor& a, const Tensor& b, bool ta, bool tb, const Tensor& bias) {
  Tensor A = ta ? a.transpose(0, 1).contiguous() : a.contiguous();
  Tensor B = tb ? b.transpose(0, 1).contiguous() : b.contiguous();
  int64_t M = A.size(0), K = A.size(1), N = B.size(1);
  std::vector<double> av = A.to_double_vector(), bv = B.to_double_vector(), out(static_cast<size_t>(M * N), 0.0);
  std::vector<double> bias_v = bias.defined() ? bias.to_double_vector() : std::vector<double>(N, 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = bias_v[j];
      for (int64_t k = 0; k < K; ++k) s += av[i * K + k] * bv[k * N + j];
      out[i * N + j] = s;
    }
  return out;
}

struct Tol {
  double atol, rtol;
};
// Values N(0,1): sums of K products have size ~sqrt(K); tolerances scale with that.
Tol tol_for(DType t, bool tf32, int64_t K) {
  double s = std::sqrt(static_cast<double>(K));
  if (t == DType::f32 && !tf32) return {1e-5 * s, 1e-5};
  if (t == DType::f32) return {2e-3 * s, 2e-3};
  return {2 * gputest::rounding(t) * s, 2 * gputest::rounding(t)};
}

}  // namespace

TEST(CudaMatmul, AllTransposesSizesAndDtypes) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  struct Size {
    int64_t M, N, K;
  };
  for (bool tf32 : {false, true}) {
    cuda::set_matmul_allow_tf32(tf32);
    for (DType t : {DType::f32, DType::f16, DType::bf16}) {
      if (tf32 && t != DType::f32) continue;
      for (Size s : {Size{1, 1, 1}, Size{37, 19, 53}, Size{64, 128, 256}, Size{3, 300, 7}, Size{256, 10, 2048}})
        for (int tr = 0; tr < 4; ++tr) {
          bool ta = tr & 1, tb = tr & 2;
          Tensor a = rand_cpu(ta ? Shape{s.K, s.M} : Shape{s.M, s.K}, 1, t);
          Tensor b = rand_cpu(tb ? Shape{s.N, s.K} : Shape{s.K, s.N}, 2, t);
          for (bool with_bias : {false, true}) {
            Tensor bias = with_bias ? rand_cpu({s.N}, 3, t) : Tensor();
            Tensor y = cuda::matmul(a.to(gpu()), b.to(gpu()), ta, tb, with_bias ? bias.to(gpu()) : Tensor());
            ASSERT_EQ(y.shape(), Shape({s.M, s.N}));
            Tol tl = tol_for(t, tf32, s.K);
            gputest::expect_near_all(y, ref_matmul(a, b, ta, tb, bias), tl.atol, tl.rtol,
                                     std::string("matmul ") + dtype_name(t) + (tf32 ? " tf32" : "") + " M=" +
                                         std::to_string(s.M) + " N=" + std::to_string(s.N) + " K=" +
                                         std::to_string(s.K) + " ta=" + std::to_string(ta) + " tb=" +
                                         std::to_string(tb) + (with_bias ? " +bias" : ""));
          }
        }
    }
  }
  cuda::set_matmul_allow_tf32(false);
}

TEST(CudaMatmul, ViewsAsOperands) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  Tensor a = rand_cpu({40, 30}, 4), b = rand_cpu({50, 20}, 5);
  Tensor ga = a.to(gpu()), gb = b.to(gpu());
  // a^T as a transposed view (strides (1, 30)), b as a column slice (leading dim 20 > 12 columns).
  Tensor y = cuda::matmul(ga.transpose(0, 1), gb.slice(0, 10, 50).slice(1, 4, 16));
  Tensor ref_b = b.slice(0, 10, 50).slice(1, 4, 16).contiguous();
  gputest::expect_near_all(y, ref_matmul(a, ref_b, true, false, Tensor()), 1e-4, 1e-5, "views");
  // A stride pattern cuBLASLt cannot take (every other column) is packed first.
  Tensor z = cuda::matmul(ga.slice(1, 0, 30, 2), gb.slice(0, 0, 15).slice(1, 0, 20));
  gputest::expect_near_all(z, ref_matmul(a.slice(1, 0, 30, 2).contiguous(), b.slice(0, 0, 15).slice(1, 0, 20).contiguous(),
                                         false, false, Tensor()),
                           1e-4, 1e-5, "strided columns");
}

TEST(CudaMatmul, LinearForwardBackward) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  // x (N, in), w (out, in), b (out): y = x w^T + b; dx = gy w; dw = gy^T x; db = sum(gy, 0).
  int64_t N = 33, in = 70, out = 12;
  Tensor x = rand_cpu({N, in}, 6), w = rand_cpu({out, in}, 7), b = rand_cpu({out}, 8), gy = rand_cpu({N, out}, 9);
  Tensor y = cuda::matmul(x.to(gpu()), w.to(gpu()), false, true, b.to(gpu()));
  gputest::expect_near_all(y, ref_matmul(x, w, false, true, b), 1e-4, 1e-5, "linear y");
  gputest::expect_near_all(cuda::matmul(gy.to(gpu()), w.to(gpu())), ref_matmul(gy, w, false, false, Tensor()), 1e-4,
                           1e-5, "linear dx");
  gputest::expect_near_all(cuda::matmul(gy.to(gpu()), x.to(gpu()), true, false), ref_matmul(gy, x, true, false, Tensor()),
                           1e-4, 1e-5, "linear dw");
}

// Tiny and odd problems (1x1x1 with a bias, K = 1, operands at odd element offsets, so 2-byte
// aligned for f16) on every path: the normal choice (whatever cuBLASLt offers, falling back when it
// offers nothing) and each fallback forced, all against the reference.
TEST(CudaMatmul, TinyAndOddShapesOnEveryPath) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  struct Case {
    int64_t M, N, K;
    int64_t offset;  // elements skipped at the start of each operand's storage
  };
  using P = cuda::MatmulPath;
  for (P first : {P::lt_epilogue, P::lt_then_bias, P::gemm_ex}) {
    cuda::set_matmul_first_path(first);
    for (DType t : {DType::f32, DType::f16, DType::bf16})
      for (Case c : {Case{1, 1, 1, 0}, Case{5, 7, 1, 0}, Case{1, 9, 3, 1}, Case{7, 3, 5, 1}, Case{17, 33, 9, 3}})
        for (bool with_bias : {false, true}) {
          std::string what = std::string(dtype_name(t)) + " M=" + std::to_string(c.M) + " N=" + std::to_string(c.N) +
                             " K=" + std::to_string(c.K) + " offset " + std::to_string(c.offset) +
                             (with_bias ? " +bias" : "") + " first path " + std::to_string(static_cast<int>(first));
          Tensor a = rand_cpu({c.M * c.K + c.offset}, 11, t), b = rand_cpu({c.K * c.N + c.offset}, 12, t);
          Tensor av = a.slice(0, c.offset, c.offset + c.M * c.K).view({c.M, c.K});
          Tensor bv = b.slice(0, c.offset, c.offset + c.K * c.N).view({c.K, c.N});
          Tensor bias = with_bias ? rand_cpu({c.N}, 13, t) : Tensor();
          Tensor ga = a.to(gpu()).slice(0, c.offset, c.offset + c.M * c.K).view({c.M, c.K});
          Tensor gb = b.to(gpu()).slice(0, c.offset, c.offset + c.K * c.N).view({c.K, c.N});
          Tensor y = cuda::matmul(ga, gb, false, false, with_bias ? bias.to(gpu()) : Tensor());
          ASSERT_EQ(y.shape(), Shape({c.M, c.N})) << what;
          Tol tl = tol_for(t, false, c.K);
          gputest::expect_near_all(y, ref_matmul(av.contiguous(), bv.contiguous(), false, false, bias), tl.atol, tl.rtol,
                                   what);
          P used = cuda::last_matmul_path(0);
          if (first == P::gemm_ex) { EXPECT_EQ(used, P::gemm_ex) << what; }
          if (first == P::lt_then_bias) { EXPECT_NE(used, P::lt_epilogue) << what; }
          if (!with_bias) { EXPECT_NE(used, P::lt_epilogue) << what << ": no bias, no epilogue"; }
          // A second call reuses the cached plan and its path.
          Tensor y2 = cuda::matmul(ga, gb, false, false, with_bias ? bias.to(gpu()) : Tensor());
          EXPECT_EQ(cuda::last_matmul_path(0), used) << what;
          EXPECT_EQ(y2.to_double_vector(), y.to_double_vector()) << what;
        }
  }
  cuda::set_matmul_first_path(P::lt_epilogue);
}

TEST(CudaMatmul, EdgeCasesAndErrors) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  Tensor a = Tensor::zeros({3, 0}, DType::f32, gpu()), b = Tensor::zeros({0, 4}, DType::f32, gpu());
  Tensor bias = Tensor::full({4}, 2.0, DType::f32, gpu());
  EXPECT_EQ(cuda::matmul(a, b, false, false, bias).to_double_vector(), std::vector<double>(12, 2.0));
  EXPECT_EQ(cuda::matmul(Tensor::zeros({0, 5}, DType::f32, gpu()), Tensor::zeros({5, 2}, DType::f32, gpu())).numel(), 0);
  Tensor x = rand_cpu({4, 5}, 1).to(gpu());
  EXPECT_THROW(cuda::matmul(x, x), Error);  // inner dims 5 and 4
  EXPECT_THROW(cuda::matmul(x, x.to(DType::bf16), false, true), Error);
  EXPECT_THROW(cuda::matmul(x, x, false, true, Tensor::zeros({5}, DType::f32, gpu())), Error);  // bias (4) expected
  EXPECT_THROW(cuda::matmul(x.reshape({20}), x), Error);
}

#endif  // KILN_WITH_CUDA
