// Softmax and the softmax cross-entropy losses: the ops (checks, one backward closure each); the
// kernels fill the slots of loss.h (core/cpu/loss.cpp, core/cuda/loss_cuda.cu).
// The forward kernels hand the backward an opaque saved state (the CPU: each row's log-sum-exp; CUDA:
// the weight sum of weighted cross_entropy).
// Tests: tests/core/loss_test.cpp, tests/core/soft_loss_test.cpp, tests/core/weighted_loss_test.cpp,
// tests/gpu/loss_test.cpp, tests/gpu/weighted_loss_test.cpp.
#include "core/ops/loss.h"

#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/nn_util.h"

namespace kiln {
KILN_DEFINE_KERNEL_SLOT(cross_entropy_forward);
KILN_DEFINE_KERNEL_SLOT(cross_entropy_backward);
KILN_DEFINE_KERNEL_SLOT(soft_cross_entropy_forward);
KILN_DEFINE_KERNEL_SLOT(soft_cross_entropy_backward);
KILN_DEFINE_KERNEL_SLOT(softmax);
}  // namespace kiln

namespace kiln::ops {

namespace {

void check_class_weights(const char* op, const Tensor& logits, const Tensor& weights) {
  if (!weights.defined()) return;
  nn::check_floating(op, "class_weights", weights);
  KILN_CHECK(weights.dim() == 1 && weights.size(0) == logits.size(1), op, ": class_weights ", weights.str(),
             " must be (K) = [", logits.size(1), "] for logits ", logits.str());
}

Tensor detached(const Tensor& t) { return t.defined() ? t.detach() : Tensor(); }

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& labels, double label_smoothing, const Tensor& class_weights) {
  const Device d = class_weights.defined() ? op_device("cross_entropy", {logits, labels, class_weights})
                                           : op_device("cross_entropy", {logits, labels});
  nn::check_floating("cross_entropy", "logits", logits);
  KILN_CHECK(logits.dim() == 2 && logits.size(0) > 0 && logits.size(1) > 0,
             "cross_entropy: logits must be (N, K) with N, K > 0, got ", logits.str());
  KILN_CHECK(labels.dtype() == DType::i64 || labels.dtype() == DType::i32,
             "cross_entropy: labels must be i64 or i32, got ", labels.str());
  KILN_CHECK(labels.dim() == 1 && labels.size(0) == logits.size(0), "cross_entropy: labels ", labels.str(),
             " do not match logits ", logits.str(), " (expected [", logits.size(0), "])");
  KILN_CHECK(label_smoothing >= 0 && label_smoothing <= 1, "cross_entropy: label_smoothing must be in [0, 1], got ",
             label_smoothing);
  check_class_weights("cross_entropy", logits, class_weights);
  const auto backward = cross_entropy_backward_kernel.get(d, "cross_entropy");
  Tensor w = detached(class_weights), y = labels.detach(), saved;
  Tensor loss = cross_entropy_forward_kernel.get(d, "cross_entropy")(logits.detach(), y, label_smoothing, w,
                                                                            needs_record({logits}) ? &saved : nullptr);
  return record("cross_entropy", {logits}, loss,
                [backward, zd = logits.detach(), y, label_smoothing, w, saved](const Tensor& g) {
                  return grads{backward(g, zd, y, label_smoothing, w, saved)};
                });
}

Tensor soft_cross_entropy(const Tensor& logits, const Tensor& targets, double label_smoothing,
                          const Tensor& class_weights) {
  const Device d = class_weights.defined() ? op_device("soft_cross_entropy", {logits, targets, class_weights})
                                           : op_device("soft_cross_entropy", {logits, targets});
  nn::check_floating("soft_cross_entropy", "logits", logits);
  nn::check_floating("soft_cross_entropy", "targets", targets);
  KILN_CHECK(logits.dim() == 2 && logits.size(0) > 0 && logits.size(1) > 0,
             "soft_cross_entropy: logits must be (N, K) with N, K > 0, got ", logits.str());
  KILN_CHECK(targets.shape() == logits.shape(), "soft_cross_entropy: targets ", targets.str(),
             " must have the logits' shape ", logits.str());
  KILN_CHECK(label_smoothing >= 0 && label_smoothing <= 1,
             "soft_cross_entropy: label_smoothing must be in [0, 1], got ", label_smoothing);
  check_class_weights("soft_cross_entropy", logits, class_weights);
  const auto backward = soft_cross_entropy_backward_kernel.get(d, "soft_cross_entropy");
  Tensor w = detached(class_weights), t = targets.detach(), saved;
  Tensor loss = soft_cross_entropy_forward_kernel.get(d, "soft_cross_entropy")(
      logits.detach(), t, label_smoothing, w, needs_record({logits}) ? &saved : nullptr);
  return record("soft_cross_entropy", {logits}, loss,
                [backward, zd = logits.detach(), t, label_smoothing, w, saved](const Tensor& g) {
                  return grads{backward(g, zd, t, label_smoothing, w, saved)};  // no gradient to the targets
                });
}

Tensor softmax(const Tensor& logits) {
  const Device d = op_device("softmax", {logits});
  nn::check_floating("softmax", "logits", logits);
  KILN_CHECK(logits.dim() >= 1 && logits.size(-1) > 0, "softmax: needs a last dim of size > 0, got ", logits.str());
  const int64_t K = logits.size(-1);
  Tensor rows = logits.detach().reshape({logits.numel() / K, K});
  return softmax_kernel.get(d, "softmax")(rows).reshape(logits.shape());
}

}  // namespace kiln::ops
