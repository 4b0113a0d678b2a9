// Copies touching a GPU (H2D, D2H, D2D, across GPUs) for every dtype pair and stride pattern, and
// fill on a GPU: the results must equal the CPU's copy/fill bit for bit.
#include <gtest/gtest.h>

#include "core/pinned.h"
#include "tests/gpu/gpu_test_util.h"

#ifdef KILN_WITH_CUDA
#include "core/host_wait.h"
#include "core/ops/linear.h"
#endif

using namespace kiln;
using kiln::gputest::gpu;

namespace {
const DType kAll[] = {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8, DType::f64};

// Values every dtype holds exactly-ish (small integers and halves), including negatives for signed types.
Tensor sample(const Shape& s, DType t) {
  std::vector<double> v(static_cast<size_t>(shape_numel(s)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>((i * 37) % 101) * 0.5 - (t == DType::u8 ? 0 : 20);
  if (t == DType::u8)
    for (double& x : v) x = std::fabs(x);
  return Tensor::from_vector(v, s, DType::f64).to(t);
}
}  // namespace

TEST(CudaCopy, RoundTripEveryDtype) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  for (DType t : kAll) {
    Tensor c = sample({3, 5, 7}, t);
    Tensor g = c.to(gpu());
    EXPECT_TRUE(g.device().is_cuda());
    EXPECT_EQ(g.to(Device::cpu()).to_double_vector(), c.to_double_vector()) << dtype_name(t);
  }
}

TEST(CudaCopy, ConversionsMatchTheCpu) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  for (DType from : kAll)
    for (DType to : kAll) {
      // Random values too, so float -> f16/bf16 rounding is exercised.
      Tensor c = (from == DType::u8 || from == DType::i32 || from == DType::i64)
                     ? sample({4, 33}, from)
                     : gputest::rand_cpu({4, 33}, 5, DType::f64, 3.0).to(from);
      Tensor want = c.to(to);
      Tensor got = c.to(gpu()).to(to);  // converted on the device
      EXPECT_TRUE(got.device().is_cuda());
      std::vector<double> g = got.to_double_vector(), w = want.to_double_vector();
      if (to == DType::u8 && from != DType::u8) continue;  // negative -> u8 is undefined on the CPU
      EXPECT_EQ(g, w) << dtype_name(from) << " -> " << dtype_name(to);
    }
}

TEST(CudaCopy, StridedSourcesAndDestinations) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  for (DType t : {DType::f32, DType::bf16, DType::i64}) {
    Tensor c = sample({4, 6, 5}, t);
    Tensor g = c.to(gpu());
    // Permuted and sliced views of a GPU tensor, packed on the device.
    Tensor pc = c.permute({2, 0, 1}).slice(1, 1, 4).contiguous();
    Tensor pg = g.permute({2, 0, 1}).slice(1, 1, 4).contiguous();
    EXPECT_TRUE(pg.device().is_cuda());
    EXPECT_EQ(pg.to_double_vector(), pc.to_double_vector()) << dtype_name(t);
    // Strided GPU -> CPU directly, and a dtype change on the way.
    EXPECT_EQ(g.transpose(0, 2).to(Device::cpu()).to_double_vector(), c.transpose(0, 2).to_double_vector());
    EXPECT_EQ(g.slice(2, 0, 5, 2).to(DType::f32).to_double_vector(), c.slice(2, 0, 5, 2).to(DType::f32).to_double_vector());
    // CPU (strided) -> a strided slice of a GPU tensor: only the slice changes.
    Tensor dst = Tensor::zeros({4, 6, 5}, t, gpu());
    dst.slice(1, 0, 6, 3).copy_(c.slice(1, 1, 3));
    Tensor ref = Tensor::zeros({4, 6, 5}, t);
    ref.slice(1, 0, 6, 3).copy_(c.slice(1, 1, 3));
    EXPECT_EQ(dst.to_double_vector(), ref.to_double_vector()) << dtype_name(t);
  }
}

TEST(CudaCopy, FillEveryDtypeAndStridedViews) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  for (DType t : kAll) {
    for (double v : {0.0, 1.0, -2.5, 3.14159}) {
      if (t == DType::u8 && v < 0) continue;
      Tensor g = Tensor::full({3, 7}, v, t, gpu());
      Tensor c = Tensor::full({3, 7}, v, t);
      EXPECT_EQ(g.to_double_vector(), c.to_double_vector()) << dtype_name(t) << " " << v;
    }
    Tensor g = Tensor::zeros({5, 6}, t, gpu());
    Tensor c = Tensor::zeros({5, 6}, t);
    g.slice(1, 1, 6, 2).fill_(7.0);
    c.slice(1, 1, 6, 2).fill_(7.0);
    EXPECT_EQ(g.to_double_vector(), c.to_double_vector()) << dtype_name(t);
  }
  Tensor big = Tensor::full({3, 1000003}, 0.25, DType::bf16, gpu());
  EXPECT_EQ(big.slice(1, 1000000, 1000003).to_double_vector(), std::vector<double>(9, 0.25));
}

TEST(CudaCopy, EmptyAndScalarTensors) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  Tensor e = Tensor::empty({0, 3}, DType::f32, gpu());
  EXPECT_EQ(e.to(Device::cpu()).numel(), 0);
  e.fill_(1.0);
  Tensor s = Tensor::scalar(4.5, DType::f32, gpu());
  EXPECT_EQ(s.item(), 4.5);
}

TEST(CudaCopy, AcrossDevices) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  if (kiln::cuda_device_count() < 2) GTEST_SKIP() << "needs two CUDA GPUs";
  Tensor c = sample({8, 9}, DType::f32);
  Tensor g1 = c.to(Device::cuda(0)).to(Device::cuda(1));
  EXPECT_EQ(g1.device(), Device::cuda(1));
  EXPECT_EQ(g1.to_double_vector(), c.to_double_vector());
  Tensor dst = Tensor::zeros({9, 8}, DType::bf16, Device::cuda(1));
  dst.copy_(c.to(Device::cuda(0)).transpose(0, 1));
  EXPECT_EQ(dst.to_double_vector(), c.transpose(0, 1).to(DType::bf16).to_double_vector());
}

#ifdef KILN_WITH_CUDA
// PinnedStaging (the trainer's MixUp/CutMix batch on a GPU): tensors made on the host each step go
// up through its pinned buffers without waiting, even behind tens of milliseconds of queued work;
// the third batch of a role (ring depth 2) reuses the first buffer only after the first upload has
// read it, so every upload keeps its own values.
TEST(CudaCopy, StagedUploadsDoNotWaitAndKeepTheirValues) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  PinnedStaging staging(2);
  Tensor a = gputest::rand_cpu({4096, 4096}, 5).to(gpu());
  Tensor c = ops::matmul(a, a);
  cuda::synchronize(0);
  auto batch = [](int k) { return Tensor::full({64, 1000}, k + 1.0); };  // a new tensor each time
  for (int k = 0; k < 40; ++k) c = ops::matmul(a, a);  // the GPU is busy for a while
  const HostWaitStats before = host_wait_stats();
  std::vector<Tensor> up;
  for (int k = 0; k < 2; ++k) {
    Tensor staged = staging.stage(batch(k), 0);
    EXPECT_TRUE(is_pinned(staged));
    up.push_back(staged.to(gpu()));
  }
  EXPECT_EQ(host_wait_stats().calls, before.calls) << "a staged upload waited for the GPU";
  up.push_back(staging.stage(batch(2), 0).to(gpu()));  // buffer 0 again: waits for upload 0
  for (int k = 0; k < 3; ++k) EXPECT_EQ(up[k].to_double_vector(), batch(k).to_double_vector()) << "upload " << k;
  Tensor pinned = empty_pinned({3}, DType::f32);
  EXPECT_TRUE(staging.stage(pinned, 1).same(pinned));  // pinned already: no copy
}
#endif  // KILN_WITH_CUDA
