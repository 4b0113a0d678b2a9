// Flip test-time augmentation (tools/deploy/tta.h).
#include "tools/deploy/tta.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/check.h"
#include "core/ops/loss.h"
#include "data/mix.h"

namespace kiln {

Tensor mean_softmax_log(const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.dim() == 2 && a.shape() == b.shape(), "mean_softmax_log: two (N, K) logits of one shape, got ", a.str(),
             " and ", b.str());
  std::vector<double> pa = ops::softmax(a.to(DType::f32)).to_double_vector();
  std::vector<double> pb = ops::softmax(b.to(DType::f32)).to_double_vector();
  std::vector<float> out(pa.size());
  const double floor = std::numeric_limits<float>::min();
  for (size_t i = 0; i < pa.size(); ++i) out[i] = static_cast<float>(std::log(std::max(0.5 * (pa[i] + pb[i]), floor)));
  return Tensor::from_vector(out, a.shape(), DType::f32);
}

Tensor eval_scores(Module& model, const Tensor& images, Device device, DType compute, const std::string& tta) {
  KILN_CHECK(tta == "none" || tta == "flip", "tta \"", tta, "\" is not accepted; accepted: none, flip");
  auto run = [&](const Tensor& x) { return model.forward(x.to(device).to(compute)).to(Device::cpu()).to(DType::f32); };
  Tensor logits = run(images);
  if (tta == "none") return logits;
  return mean_softmax_log(logits, run(flip_images_lr(images)));
}

}  // namespace kiln
