// The weight EMA's CUDA kernel (core/cuda/ema_cuda.cu) against the CPU update on the same inputs:
// tensors of 1, odd and >16K elements, several steps with warmup, a buffer copied. Tolerance:
// equal up to FMA contraction differences, 1e-6 relative.
#include <gtest/gtest.h>

#include "tests/gpu/gpu_test_util.h"

#ifdef KILN_WITH_CUDA
#include "optim/ema.h"
#include "tests/gradcheck.h"

using namespace kiln;
using kiln::gputest::gpu;
using kiln::gputest::rand_cpu;

TEST(CudaEma, UpdateMatchesTheCpu) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  const Shape shapes[] = {{1}, {37, 3}, {40000}};
  EmaOptions o;
  o.enabled = true;
  o.decay = 0.99;
  std::vector<WeightEma::Entry> cpu_entries, gpu_entries;
  std::vector<Tensor> live_cpu, live_gpu;
  for (size_t k = 0; k < 3; ++k) {
    Tensor w = rand_cpu(shapes[k], 20 + k);
    live_cpu.push_back(w.clone());
    live_gpu.push_back(w.to(gpu()));
    cpu_entries.push_back({"p" + std::to_string(k), live_cpu.back(), w.clone(), true});
    gpu_entries.push_back({"p" + std::to_string(k), live_gpu.back(), w.to(gpu()), true});
  }
  Tensor buf = rand_cpu({5}, 30);
  Tensor buf_gpu = buf.to(gpu()), ebuf_gpu = Tensor::zeros({5}, DType::f32, gpu());
  gpu_entries.push_back({"bn.running_mean", buf_gpu, ebuf_gpu, false});
  WeightEma on_cpu(o, cpu_entries), on_gpu(o, gpu_entries);
  for (int64_t t = 0; t < 5; ++t) {
    for (size_t k = 0; k < 3; ++k) {
      Tensor nw = rand_cpu(shapes[k], 100 + 10 * t + k);
      copy_tensor(live_cpu[k], nw);
      copy_tensor(live_gpu[k], nw.to(gpu()));
    }
    on_cpu.update(t);
    on_gpu.update(t);
  }
  for (size_t k = 0; k < 3; ++k)
    kiln::testing::expect_close(gpu_entries[k].ema.to(Device::cpu()), cpu_entries[k].ema.to_double_vector(), 1e-7,
                                1e-6, cpu_entries[k].name);
  EXPECT_EQ(ebuf_gpu.to(Device::cpu()).to_double_vector(), buf.to_double_vector());
}

// The skip flag on the device (an f64 [1], the fp16 scaler's count of non-finite steps in a row, read
// by the kernels): > 0 leaves the averages and the copies (f32 and i64) as they are, 0 updates them
// as update(t) does; nothing read back.
TEST(CudaEma, ASkipFlagOnTheDeviceLeavesEverythingAsItIs) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  EmaOptions o;
  o.enabled = true;
  o.decay = 0.5;
  o.warmup = false;
  Tensor p = Tensor::full({40000}, 1.0).to(gpu()), e = Tensor::zeros({40000}, DType::f32, gpu());
  Tensor n = Tensor::full({1}, 7.0, DType::i64).to(gpu()), en = Tensor::zeros({1}, DType::i64, gpu());
  WeightEma ema(o, {{"w", p, e, true}, {"n", n, en, false}});
  ema.update(0, Tensor::full({1}, 1.0, DType::f64).to(gpu()));
  EXPECT_EQ(e.to(Device::cpu()).to_double_vector(), std::vector<double>(40000, 0.0));
  EXPECT_EQ(en.to(Device::cpu()).to_double_vector(), std::vector<double>{0});
  ema.update(0, Tensor::zeros({1}, DType::f64, gpu()));
  EXPECT_EQ(e.to(Device::cpu()).to_double_vector(), std::vector<double>(40000, 0.5));
  EXPECT_EQ(en.to(Device::cpu()).to_double_vector(), std::vector<double>{7});
}

#endif  // KILN_WITH_CUDA
