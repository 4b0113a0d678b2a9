// Stage 2 of the cuDNN runtime fusion on a GPU (docs/cuda_backend.md "cuDNN runtime fusion"): a
// ResNet-50 bottleneck (256 -> 64 -> 256, 14x14, batch 8; and the stride-2 first block of a stage,
// 256 -> 128 -> 512) with BlockOptions::fused_bn_conv against the same block without it, both on the
// GPU, KILN_CUDNN_FUSION=force so the training op runs cuDNN's fused graph where cuDNN builds it
// (each shape's path printed as a `path:` line). Compared: the output, the input's gradient, every
// parameter's gradient and the running statistics, over 2 SGD steps in f32 (TF32 off) and one step in
// bf16; eval mode bit for bit the plain path.
// Tolerances (relative L2 over each tensor, |fused - plain|_2 / |plain|_2): f32 1e-4 (the fused graph
// keeps relu(x*scale + bias) in f32 as the unfused f32 ops do; the E[y^2] - mean^2 statistics and the
// different conv algorithms differ in the last f32 digits; on the CPU the same comparison holds 1e-5
// element-wise); bf16 3e-2 (a few bf16 roundings: the fused path rounds scale and bias to bf16 and
// folds the statistics' gradients into a bf16 dy, where batch_norm keeps both in f32).
// Unverified until a GPU runs it.
#include <gtest/gtest.h>

#include "tests/gpu/gpu_test_util.h"

#ifdef KILN_WITH_CUDA
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>

#include "core/autograd.h"
#include "core/ops/conv_fusion.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduce.h"
#include "layers/blocks.h"

using namespace kiln;
using kiln::gputest::gpu;
using kiln::gputest::rand_cpu;

namespace {

double rel_l2(const Tensor& got, const Tensor& want) {
  const std::vector<double> g = got.to_double_vector(), w = want.to_double_vector();
  double d = 0, n = 0;
  for (size_t i = 0; i < w.size(); ++i) d += (g[i] - w[i]) * (g[i] - w[i]), n += w[i] * w[i];
  return n > 0 ? std::sqrt(d / n) : std::sqrt(d);
}

void expect_close_l2(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_TRUE(got.defined() && want.defined()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const double e = rel_l2(got, want);
  EXPECT_LE(e, tol) << what << ": relative L2 difference " << e;
}

std::map<std::string, Tensor> by_name(const NamedTensors& v) { return {v.begin(), v.end()}; }

void compare_block(int64_t in, int64_t planes, int64_t stride, int64_t hw, DType dt, int steps, double tol) {
  const std::string tag = std::string(dtype_name(dt)) + " " + std::to_string(in) + "->" + std::to_string(planes) +
                          " stride " + std::to_string(stride);
  SCOPED_TRACE(tag);
  BlockOptions o;
  o.in_channels = in;
  o.planes = planes;
  o.stride = stride;
  auto plain = std::make_shared<Bottleneck>(o);
  o.fused_bn_conv = true;
  auto fused = std::make_shared<Bottleneck>(o);
  {
    NoGradGuard ng;
    uint64_t seed = 500;
    for (auto& [name, t] : plain->named_parameters())
      if (t.dim() == 1) {
        const bool weight = name.size() >= 6 && name.substr(name.size() - 6) == "weight";
        copy_tensor(t, ops::add_scalar(rand_cpu(t.shape(), seed++, DType::f32, 0.3), weight ? 1.0 : 0.0));
      }
    auto fp = by_name(fused->named_parameters()), fb = by_name(fused->named_buffers());
    for (auto& [name, t] : plain->named_parameters()) copy_tensor(fp.at(name), t);
    for (auto& [name, t] : plain->named_buffers()) copy_tensor(fb.at(name), t);
  }
  plain->to(gpu());
  fused->to(gpu());
  plain->train();
  fused->train();
  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const Tensor x0 = rand_cpu({8, hw, hw, in}, 60 + step, dt).to(gpu());
    Tensor xa = x0.clone().set_requires_grad(true), xb = x0.clone().set_requires_grad(true);
    Tensor ya = plain->forward(xa), yb = fused->forward(xb);
    expect_close_l2(yb, ya, tol, "output");
    const Tensor r = rand_cpu(ya.shape(), 70 + step, dt).to(gpu());
    ops::sum(ops::mul(ya, r).to(DType::f32)).backward();
    ops::sum(ops::mul(yb, r).to(DType::f32)).backward();
    expect_close_l2(xb.grad(), xa.grad(), tol, "input gradient");
    auto fp = by_name(fused->named_parameters());
    for (auto& [name, t] : plain->named_parameters()) expect_close_l2(fp.at(name).grad(), t.grad(), tol, name + ".grad");
    auto fb = by_name(fused->named_buffers());
    for (auto& [name, t] : plain->named_buffers()) {
      if (t.dtype() == DType::f32) expect_close_l2(fb.at(name), t, tol, name);
      else EXPECT_EQ(fb.at(name).to_double_vector(), t.to_double_vector()) << name;
    }
    NoGradGuard ng;
    for (Module* m : {static_cast<Module*>(plain.get()), static_cast<Module*>(fused.get())}) {
      for (Tensor& t : m->parameters()) copy_tensor(t, ops::sub(t.detach(), ops::mul_scalar(t.grad(), 1e-3)));
      m->zero_grad();
    }
  }
  plain->eval();
  fused->eval();
  const Tensor x = rand_cpu({4, hw, hw, in}, 90, dt).to(gpu());
  gputest::expect_near_all(fused->forward(x), plain->forward(x).to_double_vector(), 0, 0, "eval output");
}

}  // namespace

class CudaFusedBottleneck : public gputest::Tf32OffTest {};

TEST_F(CudaFusedBottleneck, TrainsAsThePlainBlockThroughTheFusedOp) {
  if (kiln::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  gputest::Watchdog dog(300, "CudaFusedBottleneck.TrainsAsThePlainBlockThroughTheFusedOp");
  gputest::FusionEnv force("force");
  // Which path the training op takes for the block's conv2/conv3 shapes (stride 1 block).
  for (DType dt : {DType::f32, DType::bf16}) {
    const Tensor y1 = rand_cpu({8, 14, 14, 64}, 1, dt).to(gpu());
    const Tensor s = rand_cpu({64}, 2, dt, 0.25, 1.0).to(gpu()), b = rand_cpu({64}, 3, dt, 0.5).to(gpu());
    Tensor w = rand_cpu({64, 3, 3, 64}, 4, dt, 0.05).to(gpu());
    w.set_requires_grad(true);
    ops::Conv2dParams p;
    p.pad_h = p.pad_w = 1;
    ops::ConvFusionChoice how;
    ops::ConvBnStats r = ops::conv_scale_bias_relu_stats_train(y1, s, b, w, p, &how);
    std::printf("path: training op %s 8x14x14x64 3x3: %s (%s)\n", dtype_name(dt), how.fused ? "fused" : "unfused",
                how.why.c_str());
    EXPECT_TRUE(r.y.requires_grad());
  }
  compare_block(256, 64, 1, 14, DType::f32, 2, 1e-4);
  compare_block(256, 128, 2, 14, DType::f32, 2, 1e-4);
  compare_block(256, 64, 1, 14, DType::bf16, 1, 3e-2);
}

#endif
