// Multi-tensor optimizer kernels against PyTorch's update rules written out here in double:
// SGD (momentum, dampening, Nesterov, weight decay, first step), AdamW (bias correction, decoupled
// decay), the loss scaler's unscale + finite check. Tensors of 1, odd and >16K elements, mixed
// gradient dtypes, several steps.
#include <gtest/gtest.h>

#include "tests/gpu/gpu_test_util.h"

#ifdef KILN_WITH_CUDA
#include "core/cuda/cuda_ops.h"

using namespace kiln;
using kiln::gputest::gpu;
using kiln::gputest::rand_cpu;

namespace {
const Shape kShapes[] = {{1}, {37, 3}, {40000}, {64, 3, 3, 5}};
}

TEST(CudaOptim, SgdMatchesReference) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  struct Cfg {
    double momentum, dampening;
    bool nesterov;
  };
  for (Cfg cfg : {Cfg{0, 0, false}, Cfg{0.9, 0, false}, Cfg{0.9, 0, true}, Cfg{0.8, 0.3, false}}) {
    std::vector<std::vector<double>> p, buf;
    std::vector<cuda::SgdEntry> entries;
    for (size_t k = 0; k < 4; ++k) {
      Tensor pc = rand_cpu(kShapes[k], 10 + k);
      p.push_back(pc.to_double_vector());
      buf.push_back(std::vector<double>(p.back().size(), 0.0));
      cuda::SgdEntry e;
      e.param = pc.to(gpu());
      e.momentum_buffer = Tensor::zeros(kShapes[k], DType::f32, gpu());
      e.lr = 0.1 / static_cast<double>(k + 1);
      e.weight_decay = k % 2 ? 1e-2 : 0.0;  // none on "biases"
      entries.push_back(e);
    }
    cuda::SgdOptions opt{cfg.momentum, cfg.dampening, cfg.nesterov, Tensor(), Tensor()};
    for (int step = 0; step < 3; ++step) {
      for (size_t k = 0; k < 4; ++k) {
        DType gt = k == 2 ? DType::bf16 : DType::f32;
        Tensor g = rand_cpu(kShapes[k], 100 * step + k, gt);
        std::vector<double> gv = g.to_double_vector();
        entries[k].grad = g.to(gpu());
        entries[k].first_step = step == 0;
        for (size_t i = 0; i < gv.size(); ++i) {
          double gi = gv[i] + entries[k].weight_decay * p[k][i];
          if (cfg.momentum != 0) {
            buf[k][i] = step == 0 ? gi : cfg.momentum * buf[k][i] + (1 - cfg.dampening) * gi;
            gi = cfg.nesterov ? gi + cfg.momentum * buf[k][i] : buf[k][i];
          }
          p[k][i] -= entries[k].lr * gi;
        }
      }
      cuda::sgd_step(entries, opt);
    }
    for (size_t k = 0; k < 4; ++k) {
      std::string what = "sgd m=" + std::to_string(cfg.momentum) + " nesterov=" + std::to_string(cfg.nesterov) +
                         " tensor " + std::to_string(k);
      gputest::expect_near_all(entries[k].param, p[k], 1e-5, 1e-5, what);
      if (cfg.momentum != 0) gputest::expect_near_all(entries[k].momentum_buffer, buf[k], 1e-5, 1e-5, what + " buffer");
    }
  }
}

TEST(CudaOptim, AdamWMatchesReference) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  cuda::AdamWOptions opt{0.9, 0.999, 1e-8, Tensor()};
  std::vector<std::vector<double>> p, m, v;
  std::vector<cuda::AdamWEntry> entries;
  for (size_t k = 0; k < 4; ++k) {
    Tensor pc = rand_cpu(kShapes[k], 20 + k);
    p.push_back(pc.to_double_vector());
    m.push_back(std::vector<double>(p.back().size(), 0.0));
    v.push_back(m.back());
    cuda::AdamWEntry e;
    e.param = pc.to(gpu());
    e.exp_avg = Tensor::zeros(kShapes[k], DType::f32, gpu());
    e.exp_avg_sq = Tensor::zeros(kShapes[k], DType::f32, gpu());
    e.lr = 1e-2;
    e.weight_decay = k % 2 ? 0.05 : 0.0;
    entries.push_back(e);
  }
  for (int step = 1; step <= 4; ++step) {
    for (size_t k = 0; k < 4; ++k) {
      Tensor g = rand_cpu(kShapes[k], 200 * step + k, k == 1 ? DType::f16 : DType::f32);
      std::vector<double> gv = g.to_double_vector();
      entries[k].grad = g.to(gpu());
      entries[k].step = step;
      double bc1 = 1 - std::pow(opt.beta1, step), bc2 = 1 - std::pow(opt.beta2, step);
      for (size_t i = 0; i < gv.size(); ++i) {
        p[k][i] *= 1 - entries[k].lr * entries[k].weight_decay;
        m[k][i] = opt.beta1 * m[k][i] + (1 - opt.beta1) * gv[i];
        v[k][i] = opt.beta2 * v[k][i] + (1 - opt.beta2) * gv[i] * gv[i];
        p[k][i] -= entries[k].lr / bc1 * m[k][i] / (std::sqrt(v[k][i]) / std::sqrt(bc2) + opt.eps);
      }
    }
    cuda::adamw_step(entries, opt);
  }
  for (size_t k = 0; k < 4; ++k) {
    gputest::expect_near_all(entries[k].param, p[k], 2e-5, 1e-4, "adamw param " + std::to_string(k));
    gputest::expect_near_all(entries[k].exp_avg, m[k], 1e-6, 1e-5, "adamw exp_avg " + std::to_string(k));
    gputest::expect_near_all(entries[k].exp_avg_sq, v[k], 1e-7, 1e-5, "adamw exp_avg_sq " + std::to_string(k));
  }
}

TEST(CudaOptim, UnscaleAndCheckFinite) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  std::vector<Tensor> grads;
  std::vector<std::vector<double>> want;
  for (size_t k = 0; k < 4; ++k) {
    DType t = k == 3 ? DType::f16 : DType::f32;
    Tensor g = rand_cpu(kShapes[k], 30 + k, t, 1024.0);
    std::vector<double> w;
    for (double x : g.to_double_vector()) w.push_back(Tensor::scalar(static_cast<float>(x) * (1.f / 1024.f)).to(t).item());
    want.push_back(w);
    grads.push_back(g.to(gpu()));
  }
  EXPECT_TRUE(cuda::unscale_and_check_finite(grads, 1.0 / 1024.0));
  for (size_t k = 0; k < 4; ++k) gputest::expect_near_all(grads[k], want[k], 0, 0, "unscaled " + std::to_string(k));
  std::vector<double> bad(40000, 1.0);
  bad[39999] = INFINITY;
  grads[2] = Tensor::from_vector(bad, {40000}, DType::f32, gpu());
  EXPECT_FALSE(cuda::unscale_and_check_finite(grads, 0.5));
  bad[39999] = NAN;
  grads[2] = Tensor::from_vector(bad, {40000}, DType::f32, gpu());
  EXPECT_FALSE(cuda::unscale_and_check_finite(grads, 0.5));
  EXPECT_TRUE(cuda::unscale_and_check_finite({}, 0.5));
}

TEST(CudaOptim, BadEntriesThrow) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  cuda::SgdEntry e;
  e.param = Tensor::zeros({4}, DType::f32, gpu());
  e.grad = Tensor::zeros({5}, DType::f32, gpu());
  EXPECT_THROW(cuda::sgd_step({e}, {}), Error);  // shape mismatch
  e.grad = Tensor::zeros({4}, DType::f32, gpu());
  EXPECT_THROW(cuda::sgd_step({e}, {0.9, 0.0, false, Tensor(), Tensor()}), Error);  // momentum without a buffer
  e.param = Tensor::zeros({4}, DType::bf16, gpu());
  EXPECT_THROW(cuda::sgd_step({e}, {}), Error);  // master weights must be f32
}

#endif  // KILN_WITH_CUDA
