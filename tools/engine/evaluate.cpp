// The evaluation pass (see evaluate.h).
#include "tools/engine/evaluate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>

#include "core/autograd.h"
#include "core/ops/loss.h"
#include "core/ops/reduce.h"
#include "tools/deploy/tta.h"
#include "tools/engine/batch_images.h"
#include "tools/engine/progress.h"

namespace kiln {

namespace {

double top_k_correct(const Tensor& logits, const Tensor& labels, int64_t k, int64_t count) {
  Tensor idx = ops::topk_indices(logits, k);
  std::vector<int64_t> top = idx.to_int_vector(), y = labels.to_int_vector();
  int64_t kk = idx.size(1), correct = 0;
  for (int64_t i = 0; i < count; ++i)
    for (int64_t j = 0; j < kk; ++j)
      if (top[i * kk + j] == y[i]) {
        ++correct;
        break;
      }
  return static_cast<double>(correct);
}

}  // namespace

EvalCounts run_eval(Module& model, DataLoader& loader, Device device, DType compute, int64_t epoch,
                    int64_t num_classes, std::vector<std::vector<int64_t>>* confusion, const std::string& tta,
                    const EvalProgress* progress, const std::function<bool(int64_t batch)>& stop) {
  NoGradGuard ng;
  model.eval();
  loader.start_epoch(epoch);
  EvalCounts c;
  Batch b;
  std::unique_ptr<Progress> bar;
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t batches = loader.batches_per_epoch();
  if (progress)
    bar = std::make_unique<Progress>(progress->phase, static_cast<int>(progress->epoch),
                                     static_cast<int>(progress->epochs), batches, progress->tty, 0, 30.0);
  for (int64_t i = 1;; ++i) {
    if (stop && stop(i - 1)) {
      c.abandoned = true;
      loader.stop();
      break;
    }
    if (!loader.next(b)) break;
    int64_t n = b.size() - b.padding;  // padded samples repeat others: count each sample once
    // u8 batches (data.upload) are normalised on the device (batch_images.h). Flip TTA mirrors host
    // images (tools/deploy/tta.h): a u8 batch is then normalised on the CPU, to the same values.
    const Tensor images = tta == "none"              ? device_images(b, device, compute)
                          : b.images.dtype() == DType::u8 ? device_images(b, Device::cpu(), DType::f32)
                                                          : b.images;
    Tensor logits = eval_scores(model, images, device, compute, tta);  // the logits, or flip TTA's (tools/deploy/tta.h)
    if (n < b.size()) logits = logits.slice(0, 0, n).contiguous();
    Tensor labels = n < b.size() ? b.labels.slice(0, 0, n).contiguous() : b.labels;
    c.loss_sum += ops::cross_entropy(logits, labels).item() * n;
    c.top1 += top_k_correct(logits, labels, 1, n);
    c.top5 += top_k_correct(logits, labels, std::min<int64_t>(5, num_classes), n);
    c.samples += n;
    if (confusion) {
      std::vector<int64_t> pred = ops::argmax(logits, 1).to_int_vector(), y = labels.to_int_vector();
      for (int64_t k = 0; k < n; ++k) (*confusion)[y[k]][pred[k]] += 1;
    }
    if (bar) {  // this rank's figures so far (rank 0 shows its shard's)
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      char buf[96];
      std::snprintf(buf, sizeof buf, "top1 %.1f%%  %.0f img/s  ", 100 * c.top1 / c.samples, c.samples / secs);
      bar->update(i, buf + format_duration(secs) + " eta " +
                         format_duration(eta_seconds(secs, static_cast<double>(i), static_cast<double>(batches))));
    }
  }
  if (bar) bar->clear();
  model.train();
  return c;
}

void all_reduce_confusion(Communicator& comm, std::vector<std::vector<int64_t>>& confusion) {
  std::vector<double> flat;
  for (const auto& row : confusion) flat.insert(flat.end(), row.begin(), row.end());
  comm.all_reduce_doubles(flat);
  size_t i = 0;
  for (auto& row : confusion)
    for (int64_t& v : row) v = static_cast<int64_t>(std::llround(flat[i++]));
}

}  // namespace kiln
