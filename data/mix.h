// Batch-level MixUp / CutMix with soft targets (timm's Mixup in mode="batch"), and the left-right
// flip of a batch for flip test-time augmentation. docs/mixup_tta.md.
//
// One draw per batch: with probability `prob` the batch is mixed, by CutMix with probability
// `switch_prob` when both alphas are > 0 (only the enabled one otherwise), with
// lambda ~ Beta(alpha, alpha) of the chosen method. Sample i is paired with sample N-1-i (the batch
// flipped, as timm's x.flip(0)). MixUp: x_i <- lam x_i + (1-lam) x_{N-1-i}. CutMix: a box of
// sides int(H sqrt(1-lam)), int(W sqrt(1-lam)) centred at a uniform pixel, clipped to the image,
// is pasted from x_{N-1-i}, and lam is corrected to 1 - box area / (H W) (timm's correct_lam).
// Targets: lam onehot_e(y_i) + (1-lam) onehot_e(y_{N-1-i}) with onehot_e = (1-e) onehot + e/K
// (timm's mixup_target: label smoothing e applied to both one-hots).
//
// Determinism: lambda, the method and the box are a pure function of (seed, epoch, batch index)
// (SampleRng, data/transform.h), the pairing of the batch's order: the same for any number of loader
// workers, and on resume. Tests: tests/data/mix_test.cpp.
#pragma once
#include <cstdint>

#include "core/pinned.h"
#include "core/json_reader.h"
#include "core/tensor.h"
#include "data/loader.h"
#include "data/transform.h"

namespace kiln {

struct MixupOptions {
  /// MixUp's Beta(alpha, alpha); 0 disables MixUp (default 0)
  double mixup_alpha = 0.0;
  /// CutMix's Beta(alpha, alpha); 0 disables CutMix (default 0)
  double cutmix_alpha = 0.0;
  /// probability that a batch is mixed at all, in [0, 1] (default 1)
  double prob = 1.0;
  /// with both alphas > 0: probability of CutMix instead of MixUp for a mixed batch, in [0, 1] (default 0.5)
  double switch_prob = 0.5;

  // True when some batch can be mixed (an alpha > 0 and prob > 0): the loss then uses soft targets.
  bool enabled() const { return prob > 0 && (mixup_alpha > 0 || cutmix_alpha > 0); }
  // Reads {"mixup_alpha", "cutmix_alpha", "prob", "switch_prob"}; a bad value is an error naming
  // `path`.key and what is accepted.
  static MixupOptions from_json(const json& j, const std::string& path = "train.mixup");
  json to_json() const;
};

// One batch's draw.
struct MixParams {
  bool mixed = false;   // false: the batch is left as it is (lam = 1)
  bool cutmix = false;  // CutMix (box) rather than MixUp (blend)
  double lam = 1.0;     // weight of sample i's own label (after the box correction for CutMix)
  int64_t y0 = 0, y1 = 0, x0 = 0, x1 = 0;  // CutMix box: rows [y0, y1), columns [x0, x1)
};

// The draw of batch `batch_index` of `epoch` for images of h x w pixels.
MixParams draw_mix(const MixupOptions& o, uint64_t seed, int64_t epoch, int64_t batch_index, int64_t h, int64_t w);

// The images (N, H, W, C) f32 or bf16 on the CPU, mixed as `p` says, as a new tensor (the input is
// left unchanged; a batch that is not mixed is returned as it is). `out`, when given, is written
// instead of a new tensor: contiguous, the images' shape and dtype, not the images themselves.
Tensor mix_images(const Tensor& images, const MixParams& p, Tensor out = Tensor());

// Soft targets (N, K) f32: lam onehot_e(y_i) + (1-lam) onehot_e(y_{N-1-i}), onehot_e = (1-e) onehot + e/K.
Tensor mix_targets(const Tensor& labels, int64_t num_classes, double lam, double label_smoothing);

// The label that carries the larger weight of each mixed sample (y_i when lam >= 0.5, else
// y_{N-1-i}): what the training accuracy counts during mixed training.
Tensor dominant_labels(const Tensor& labels, double lam);

// Gamma(a, 1) (Marsaglia-Tsang) and Beta(a, b) drawn from `rng`, for the draw; exposed for tests.
double sample_gamma(SampleRng& rng, double a);
double sample_beta(SampleRng& rng, double a, double b);

// A training batch as the step uses it (tools/engine/epoch.cpp): with mixup enabled, the images mixed
// by draw_mix(o, seed, b.epoch, b.index, H, W), the soft targets (N, K) f32 on the CPU with label
// smoothing applied as timm does, and labels = dominant_labels (for the training accuracy); with
// mixup off: b.images, no targets (undefined: the loss uses the class labels) and b.labels.
// With `staging` (training on a GPU) the mixed tensors are made in its pinned buffers (roles 0, 1,
// 2: images, targets, labels), so that their upload does not wait for the device.
// An enabled mixup draws soft targets for every batch, an unmixed one too (lam = 1: the smoothed one-hots).
struct MixedBatch {
  Tensor images, targets, labels;
  MixParams params;
};
MixedBatch mix_batch(const MixupOptions& o, uint64_t seed, const Batch& b, int64_t num_classes, double label_smoothing,
                     PinnedStaging* staging = nullptr);

// Flip TTA: the images (N, H, W, C) on the CPU (any dtype) mirrored left-right (along W), a new tensor.
Tensor flip_images_lr(const Tensor& images);

}  // namespace kiln
