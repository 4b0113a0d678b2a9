// ops::normalize_u8 on the GPU (core/cuda/normalize_u8_cuda.cu, through the op and its kernel slot)
// against the CPU op: equal bit for bit in f32, bf16 and f16 (both build the table with the same
// double expression and round to nearest even), for 1 and 3 channels, sizes that do and do not
// take the 4-byte path, and a strided input.
#include <gtest/gtest.h>

#include "tests/gpu/gpu_test_util.h"

#ifdef KILN_WITH_CUDA
#include "core/ops/normalize_u8.h"

using namespace kiln;
using kiln::gputest::gpu;

namespace {
Tensor random_bytes(const Shape& s, uint64_t seed) {
  Tensor t = Tensor::empty(s, DType::u8);
  uint8_t* p = static_cast<uint8_t*>(t.raw_data());
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<uint8_t>(mix64(seed * 1000003 + static_cast<uint64_t>(i)));
  return t;
}
}  // namespace

TEST(CudaNormalizeU8, EqualsTheCpuOpInEveryDtype) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  EXPECT_NE(normalize_u8_kernel.find(gpu()), nullptr);  // registered by cuda::register_kernels
  const std::vector<double> mean3 = {0.485, 0.456, 0.406}, std3 = {0.229, 0.224, 0.225};
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    for (const Shape& shape : {Shape{1, 1, 1, 3}, Shape{2, 7, 5, 3}, Shape{64, 32, 32, 3}, Shape{5, 9, 9, 1}}) {
      Tensor x = random_bytes(shape, 11);
      const bool grey = shape.back() == 1;
      const std::vector<double> m = grey ? std::vector<double>{0.286} : mean3, s = grey ? std::vector<double>{0.353} : std3;
      Tensor yc = ops::normalize_u8(x, m, s, t);
      Tensor yg = ops::normalize_u8(x.to(gpu()), m, s, t);
      ASSERT_TRUE(yg.device().is_cuda());
      ASSERT_EQ(yg.dtype(), t);
      ASSERT_EQ(yg.shape(), shape);
      EXPECT_EQ(yg.to(Device::cpu()).to_double_vector(), yc.to_double_vector()) << dtype_name(t) << " " << shape_str(shape);
    }
}

TEST(CudaNormalizeU8, StridedInputAndBadArguments) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  Tensor x = random_bytes({3, 6, 8, 3}, 5);
  Tensor view = x.to(gpu()).slice(2, 1, 7);
  EXPECT_EQ(ops::normalize_u8(view, {0.5}, {0.25}, DType::f32).to(Device::cpu()).to_double_vector(),
            ops::normalize_u8(x.slice(2, 1, 7), {0.5}, {0.25}, DType::f32).to_double_vector());
  EXPECT_THROW(ops::normalize_u8(x.to(gpu()).to(DType::f32), {0.5}, {0.25}, DType::f32), Error);
  EXPECT_THROW(ops::normalize_u8(x.to(gpu()), {0.5, 0.5}, {0.25}, DType::f32), Error);
}
#endif
