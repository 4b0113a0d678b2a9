// A convolution whose input is the previous batch norm's affine + ReLU and whose output's
// per-channel statistics come with it: ResNet's BN -> ReLU -> conv, with the next BN's sums
// (kiln issue #36, section 2: stage 1 the forward op; stage 2 conv_scale_bias_relu_stats_train and
// bn_finalize with autograd, which layers/blocks.cpp's Bottleneck chains when `fused_bn_conv` is on;
// stage 3 the training op's backward, conv_scale_bias_relu_backward, fused on a GPU as well).
//   x: (N, H, W, Cin) NHWC   scale, bias: (Cin)   w: (Cout, KH, KW, Cin)   (groups must be 1)
//   y     = conv2d(relu(x * scale[c] + bias[c]), w)      (N, OH, OW, Cout), x's dtype
//   sum   = sum of y over (N, OH, OW)                     (Cout), f32
//   sumsq = sum of y*y over (N, OH, OW)                   (Cout), f32
// x, scale, bias and w share one dtype: f16, bf16 or f32 (conv2d's dtypes).
// On a GPU the kernel of the slot below may run it as ONE cuDNN graph (scale-bias-ReLU-conv-genstats,
// core/cuda/conv_fusion_cuda.cu), chosen per shape by timing it against the unfused chain the first
// time a shape is seen; every cuDNN refusal runs the unfused chain. Everywhere else (the CPU, a build
// without cuDNN's frontend headers, KILN_CUDNN_FUSION=0, and whenever autograd must record the op)
// the op is the unfused chain of public ops: mul, add, relu, conv2d, sum (the sums of the values of
// y as rounded to its dtype, accumulated in f32). This op records only the unfused chain; the fused
// kernel runs when no input needs a gradient, and in training through conv_scale_bias_relu_stats_train.
// docs/cuda_backend.md, "cuDNN runtime fusion".
// Tests: tests/core/conv_fusion_test.cpp (the ops' contracts on the CPU), tests/gpu/conv_fusion_test.cpp; the
// training path: tests/layers/fused_bottleneck_test.cpp, tests/models/fused_resnet_test.cpp,
// tests/gpu/fused_bottleneck_test.cpp.
#pragma once
#include <cstddef>
#include <functional>
#include <list>
#include <map>
#include <string>
#include <vector>

#include "core/kernel_slot.h"
#include "core/ops/conv2d.h"
#include "core/tensor.h"

namespace kiln::ops {

struct ConvBnStats {
  Tensor y, sum, sumsq;
};

// How one call ran (for tests and `kiln bench conv_fusion`). fused_ms/unfused_ms: the first-seen
// timings of the shape (ms, best of 3 runs), -1 where not timed.
struct ConvFusionChoice {
  bool fused = false;        // this call ran cuDNN's fused graph
  std::string why;           // why it ran what it ran: "timed", "refused: <cuDNN's reason>", ...
  double fused_ms = -1, unfused_ms = -1;
};

ConvBnStats conv_scale_bias_relu_stats(const Tensor& x, const Tensor& scale, const Tensor& bias, const Tensor& w,
                                       const Conv2dParams& p, ConvFusionChoice* how = nullptr);

// Process-wide counts of the calls that reached a device's fused kernel (forward, and each side of the
// backward asked for) and of those that ran cuDNN's fused graph: what `kiln bench train fused_bn_conv=1`
// reports, so that a step's speed can be read against what actually ran fused. Calls made by the
// host: a CUDA graph's replays make none (they repeat the captured step's choices).
struct ConvFusionCounts {
  int64_t forward = 0, forward_fused = 0;
  int64_t dgrad = 0, dgrad_fused = 0;
  int64_t wgrad = 0, wgrad_fused = 0;
};
ConvFusionCounts conv_fusion_counts();
void reset_conv_fusion_counts();
// The same values as a chain of public ops (recorded by autograd when an input needs a gradient).
ConvBnStats conv_scale_bias_relu_stats_unfused(const Tensor& x, const Tensor& scale, const Tensor& bias,
                                               const Tensor& w, const Conv2dParams& p);

// Stage 2, the op for training: the same forward as conv_scale_bias_relu_stats run on detached inputs
// (so on a GPU the fused cuDNN graph runs in training too), recorded by autograd as two nodes: y from
// (x, scale, bias, w), and the sums from y. y's backward is conv_scale_bias_relu_backward
// (below): recompute a = relu(x*scale + bias), conv2d's backward kernel for da (dgrad) and dw (wgrad),
// the ReLU mask (da = 0 where a <= 0), dscale = sum(da*x), dbias = sum(da) (over N, H, W, in f32),
// dx = da*scale; on a GPU cuDNN's fused dgrad and wgrad graphs where chosen.
// The sums' node (ops::record_channel_moments, one pass over y) folds their gradients into dy:
// d sum/dy = 1, d sumsq/dy = 2y (the engine adds that to the gradient coming from y's consumers). Same values and gradients as the unfused op under
// autograd, up to rounding. x must have a non-empty batch.
ConvBnStats conv_scale_bias_relu_stats_train(const Tensor& x, const Tensor& scale, const Tensor& bias,
                                             const Tensor& w, const Conv2dParams& p,
                                             ConvFusionChoice* how = nullptr);

// A training batch norm's finalize from per-channel sums over `count` values (count >= 2): the step
// that turns a fused conv's sum and sumsq into the next fused conv's scale and bias (stage 2's
// building block; one kernel forward and one backward, core/ops/bn_finalize.h, recorded by autograd as
// one node when sum, sumsq, gamma or beta need a gradient, so the batch norm's backward through its batch
// statistics follows). Math in f64, outputs rounded once: mean = sum / count,
// var = max(sumsq / count - mean^2, 0) (biased; no shift, so precision drops where mean^2 >> var),
// invstd = 1 / sqrt(var + eps), scale = gamma * invstd, bias = beta - mean * scale (gamma, beta
// undefined: 1 and 0), scale and bias returned in `out` (the next conv's dtype). running_mean and
// running_var (f32, (C), both defined or both undefined) are updated in place as batch_norm does:
// running = (1 - momentum) * running + momentum * batch, the variance unbiased by count / (count - 1)
// (not recorded).
struct BnFinalized {
  Tensor scale, bias;   // (C) in `out`
  Tensor mean, invstd;  // (C) f32: what the batch norm's backward needs
};
BnFinalized bn_finalize(const Tensor& sum, const Tensor& sumsq, int64_t count, const Tensor& gamma, const Tensor& beta,
                        const Tensor& running_mean, const Tensor& running_var, double momentum, double eps, DType out);

// Stage 3, the backward of y = conv2d(a, w), a = relu(x*scale + bias), for y's gradient gy (y's shape
// and dtype): the gradients `need` asks for (the others undefined), in x's dtype:
//   da_m   = conv_dgrad(gy, w), 0 where a <= 0
//   dx     = da_m * scale[c]
//   dscale = sum over (N, H, W) of da_m * x      (accumulated in f32)
//   dbias  = sum over (N, H, W) of da_m          (accumulated in f32)
//   dw     = conv_wgrad(gy, a)
// The unfused version (the CPU's, and the fallback) recomputes a (rounded to the dtype as the
// forward's unfused chain rounds it) and runs conv2d's backward kernel, the ReLU mask, mul and sums.
// On a GPU the device's kernel (slot below) may run two cuDNN graphs instead, each chosen per shape
// like the forward's: dw = conv_wgrad(gy, relu(x*scale + bias)) with the prologue in the graph (a never
// written to memory), and da_m = relu_bwd(conv_dgrad(gy, w), x*scale + bias) followed by one kiln
// kernel for dx, dscale and dbias. The training op's autograd node calls this op; it records nothing.
struct ConvBnGrads {
  Tensor dx, dscale, dbias, dw;  // undefined where not asked for
};
struct ConvFusionNeeds {
  bool x = false, scale = false, bias = false, w = false;
  bool act() const { return x || scale || bias; }  // anything from the dgrad side
};
// How each backward graph ran (dgrad: dx, dscale, dbias; wgrad: dw); why = "not needed" where the
// gradients of that side were not asked for.
struct ConvFusionBackwardChoice {
  ConvFusionChoice dgrad, wgrad;
};
ConvBnGrads conv_scale_bias_relu_backward(const Tensor& gy, const Tensor& x, const Tensor& scale, const Tensor& bias,
                                          const Tensor& w, const Conv2dParams& p, const ConvFusionNeeds& need,
                                          ConvFusionBackwardChoice* how = nullptr);
ConvBnGrads conv_scale_bias_relu_backward_unfused(const Tensor& gy, const Tensor& x, const Tensor& scale,
                                                  const Tensor& bias, const Tensor& w, const Conv2dParams& p,
                                                  const ConvFusionNeeds& need);

}  // namespace kiln::ops

namespace kiln::detail {

// The bound of the CUDA kernels' plan cache: at most this many built cuDNN graphs per device (the
// forward, wgrad and dgrad graphs of ResNet-50's 19 fused shapes at 4 batch sizes fit); beyond it the
// least recently used graph is dropped (a later call of its shape builds and times it again). A
// refused shape is remembered apart, outside the bound (it holds no graph), and stays unfused.
constexpr size_t kConvFusionCacheEntries = 256;

// The eviction order of that cache, kept apart from cuDNN so that it can be tested on the CPU: the
// keys in use order, at most `capacity` (>= 1) of them.
template <class K>
class LruKeys {
 public:
  explicit LruKeys(size_t capacity) : cap_(capacity < 1 ? 1 : capacity) {}
  // Makes k the most recently used key (adding it if new); returns the keys dropped to stay within
  // the capacity, least recently used first (never k).
  std::vector<K> touch(const K& k) {
    auto it = pos_.find(k);
    if (it != pos_.end()) {
      order_.splice(order_.begin(), order_, it->second);
      return {};
    }
    order_.push_front(k);
    pos_[k] = order_.begin();
    std::vector<K> dropped;
    while (order_.size() > cap_) {
      dropped.push_back(order_.back());
      pos_.erase(order_.back());
      order_.pop_back();
    }
    return dropped;
  }
  // Forgets k (no-op when absent).
  void erase(const K& k) {
    auto it = pos_.find(k);
    if (it == pos_.end()) return;
    order_.erase(it->second);
    pos_.erase(it);
  }
  bool contains(const K& k) const { return pos_.count(k) != 0; }
  size_t size() const { return order_.size(); }
  size_t capacity() const { return cap_; }

 private:
  size_t cap_;
  std::list<K> order_;  // most recently used first
  std::map<K, typename std::list<K>::iterator> pos_;
};

}  // namespace kiln::detail

namespace kiln {

// --- the fused kernel (core/kernel_slot.h), a kernel a device may lack (find(), not get()): detached
// x, scale, bias, w already checked by the op (one dtype, 4-D shapes, Cin matching, groups 1). Returns
// y in x's dtype and sum, sumsq (Cout) in f32, the values conv_scale_bias_relu_stats states. It calls
// `unfused` (the op's chain, no autograd) for any shape, dtype or setting it does not fuse, and to
// time the alternative; it fills `how` when not null.
using ConvFusionUnfused = std::function<ops::ConvBnStats()>;
extern KernelSlot<ops::ConvBnStats (*)(const Tensor& x, const Tensor& scale, const Tensor& bias, const Tensor& w,
                                       const ops::Conv2dParams& p, const ConvFusionUnfused& unfused,
                                       ops::ConvFusionChoice* how)>
    conv_bn_stats_forward_kernel;

// --- the fused backward kernel (find(), not get()): detached, contiguous gy, x, scale, bias, w already
// checked by ops::conv_scale_bias_relu_backward (gy of y's shape and x's dtype). Returns at least the
// gradients `need` asks for, the values that op states. It calls `unfused` with the gradients it
// leaves to the unfused chain (a subset of need), for any shape, dtype or setting it does not fuse,
// and to time the alternative; it fills `how` when not null.
using ConvFusionBackwardUnfused = std::function<ops::ConvBnGrads(const ops::ConvFusionNeeds& need)>;
extern KernelSlot<ops::ConvBnGrads (*)(const Tensor& gy, const Tensor& x, const Tensor& scale, const Tensor& bias,
                                       const Tensor& w, const ops::Conv2dParams& p, const ops::ConvFusionNeeds& need,
                                       const ConvFusionBackwardUnfused& unfused, ops::ConvFusionBackwardChoice* how)>
    conv_bn_stats_backward_kernel;

}  // namespace kiln
