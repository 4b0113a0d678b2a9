#include "optim/grad_sync.h"

#include "core/autograd.h"
#include "core/ops/elementwise.h"

namespace kiln {

GradSync::GradSync(std::vector<Tensor> params, Communicator& comm, size_t bucket_bytes, bool always_reduce)
    : params_(std::move(params)),
      comm_(comm),
      where_(params_.size()),
      arrived_(params_.size(), false),
      active_(comm.size() > 1 || always_reduce) {
  // Reverse registration order: the last layer's gradients are ready first.
  Bucket cur;
  size_t cur_bytes = 0;
  auto close = [&] {
    if (cur.params.empty()) return;
    int64_t n = 0;
    for (size_t i = 0; i < cur.params.size(); ++i) {
      cur.offsets.push_back(n);
      n += params_[cur.params[i]].numel();
    }
    cur.flat = Tensor::zeros({n}, DType::f32, params_[cur.params[0]].device());
    for (size_t i = 0; i < cur.params.size(); ++i) where_[cur.params[i]] = {buckets_.size(), i};
    buckets_.push_back(std::move(cur));
    cur = Bucket();
    cur_bytes = 0;
  };
  for (size_t k = params_.size(); k-- > 0;) {
    const Tensor& p = params_[k];
    KILN_CHECK(p.dtype() == DType::f32, "data-parallel gradients need f32 parameters, got ", p.str());
    if (!cur.params.empty() && p.device() != params_[cur.params[0]].device()) close();
    cur.params.push_back(k);
    cur_bytes += p.nbytes();
    if (cur_bytes >= bucket_bytes) close();
  }
  close();
  for (auto& b : buckets_) b.pending = b.params.size();
  if (!active_) return;  // one rank: nothing to synchronise
  for (size_t k = 0; k < params_.size(); ++k) {
    Tensor p = params_[k];
    p.register_grad_ready_hook([this, k](const Tensor&) { on_grad_ready(k); });
  }
}

void GradSync::on_grad_ready(size_t k) {
  if (deferred_ || arrived_[k]) return;  // accumulating, or a second backward in the same step: counted at finish()
  arrived_[k] = true;
  auto [bi, slot] = where_[k];
  Bucket& b = buckets_[bi];
  if (--b.pending == 0) launch(b, bi);
}

void GradSync::launch(Bucket& b, size_t index) {
  // Pack the bucket: the latest .grad of each parameter (zeros where none arrived).
  for (size_t i = 0; i < b.params.size(); ++i) {
    const Tensor& p = params_[b.params[i]];
    Tensor dst = b.flat.slice(0, b.offsets[i], b.offsets[i] + p.numel()).view(p.shape());
    Tensor g = p.grad();
    if (g.defined()) copy_tensor(dst, g);
    else dst.fill_(0.0);
  }
  if (on_launch) on_launch(index);
  b.work = comm_.all_reduce_sum_async(b.flat);
}

void GradSync::finish() {
  if (!active_) return;
  NoGradGuard ng;
  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    Bucket& b = buckets_[bi];
    if (!b.work) launch(b, bi);  // some gradients never arrived (unused parameters)
  }
  double inv = 1.0 / comm_.size();
  for (auto& b : buckets_) {
    b.work->wait();
    b.work.reset();
    Tensor avg = ops::mul_scalar(b.flat, inv);
    for (size_t i = 0; i < b.params.size(); ++i) {
      Tensor p = params_[b.params[i]];
      Tensor src = avg.slice(0, b.offsets[i], b.offsets[i] + p.numel()).view(p.shape());
      Tensor g = Tensor::empty(p.shape(), DType::f32, p.device());
      copy_tensor(g, src);
      p.set_grad(g);
    }
    b.pending = b.params.size();
  }
  std::fill(arrived_.begin(), arrived_.end(), false);
}

}  // namespace kiln
