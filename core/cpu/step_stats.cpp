// The trainer's per-step statistics on the CPU (the kernel of core/step_stats.h's
// accumulate_step_stats slot; CUDA's is in core/cuda/loss_cuda.cu): the micro-batch's weighted loss and its
// top-1 hits added to the accumulators, a non-finite loss counted and the first one remembered.
// Top-1 ranks as ops::topk_indices does (the first maximum; NaN above every number).
// Tests: tests/core/step_stats_test.cpp, tests/engine/trainer_test.cpp.
#include <cmath>

#include "core/step_stats.h"

namespace kiln::cpu {

void accumulate_step_stats(const Tensor& acc, const Tensor& loss, const Tensor& logits0, const Tensor& labels0,
                           double weight, int64_t step) {
  const char* op = "accumulate_step_stats";
  KILN_CHECK(acc.dtype() == DType::f64 && acc.numel() == 5 && acc.is_contiguous(), op, ": acc must be 5 packed f64, got ",
             acc.str());
  KILN_CHECK(loss.dtype() == DType::f32 && loss.numel() == 1, op, ": loss must be one f32 value, got ", loss.str());
  KILN_CHECK(logits0.dim() == 2 && is_floating(logits0.dtype()) && labels0.dim() == 1 &&
                 labels0.size(0) == logits0.size(0) && labels0.dtype() == DType::i64,
             op, ": logits (N, K) and i64 labels (N), got ", logits0.str(), " and ", labels0.str());
  const Tensor logits = (logits0.dtype() == DType::f32 ? logits0 : logits0.to(DType::f32)).contiguous();
  const Tensor labels = labels0.contiguous();
  const int64_t n = logits.size(0), k = logits.size(1);
  const float* p = logits.data<float>();
  const int64_t* y = labels.data<int64_t>();
  int64_t correct = 0;
  for (int64_t i = 0; k > 0 && i < n; ++i) {
    const float* row = p + i * k;
    int64_t best = 0;
    for (int64_t j = 1; j < k; ++j) {
      const float v = row[j], m = row[best];
      if (m == m && (v > m || v != v)) best = j;  // the first NaN wins, as in topk_indices
    }
    correct += best == y[i];
  }
  double* a = acc.data<double>();
  const float l = loss.data<float>()[0];
  if (std::isfinite(l)) {
    a[0] += static_cast<double>(l) * weight;
  } else {
    if (a[2] == 0) {
      a[3] = static_cast<double>(step);
      a[4] = static_cast<double>(l);
    }
    a[2] += 1;
  }
  a[1] += static_cast<double>(correct);
}

}  // namespace kiln::cpu
