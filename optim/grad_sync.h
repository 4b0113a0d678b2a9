// Data-parallel gradient synchronisation: gradients are averaged over ranks in buckets of about
// `bucket_bytes`, each bucket's all-reduce launched as soon as its last gradient is ready during
// backward (grad-ready hooks), so communication overlaps the rest of backward. Buckets follow the
// reverse of the parameters' registration order, which is the order backward produces them.
// After finish(), every parameter's .grad holds the average over ranks: the gradient of the
// combined batch when every rank computes a mean loss over an equal share of it.
// With one rank there is nothing to average: the constructor registers no hooks and finish() returns
// at once, unless `always_reduce` asks for the whole bucket path anyway (tests on a one-GPU machine
// exercise the NCCL all-reduce that way; on one rank it is the identity).
// Tests: tests/optim/grad_sync_test.cpp, tests/gpu/data_parallel_test.cpp, tests/mpi/.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "core/comm.h"
#include "core/tensor.h"

namespace kiln {

class GradSync {
 public:
  GradSync(std::vector<Tensor> params, Communicator& comm, size_t bucket_bytes = 25u << 20,
           bool always_reduce = false);
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  // Waits for every bucket (launching those whose gradients did not all arrive, with zeros for the
  // missing ones), divides by the number of ranks and writes the averages into .grad.
  void finish();
  // Gradient accumulation (DistributedDataParallel's no_sync()): while deferred, backward passes
  // launch nothing and the gradients sum locally in .grad; the first backward after
  // set_deferred(false) launches each bucket with the summed gradients, and finish() averages them.
  // So the all-reduce runs once per optimizer step however many micro-batches it has.
  void set_deferred(bool deferred) { deferred_ = deferred; }

  size_t num_buckets() const { return buckets_.size(); }
  const std::vector<size_t>& bucket_params(size_t b) const { return buckets_[b].params; }
  // Test hook: called with the bucket index when its all-reduce is launched.
  std::function<void(size_t bucket)> on_launch;

 private:
  struct Bucket {
    std::vector<size_t> params;   // indices into params_
    std::vector<int64_t> offsets;  // element offset of each param in `flat`
    Tensor flat;                   // f32 (numel) on the params' device
    size_t pending = 0;
    std::unique_ptr<Work> work;
  };
  void on_grad_ready(size_t param);
  void launch(Bucket& b, size_t index);

  std::vector<Tensor> params_;
  Communicator& comm_;
  std::vector<Bucket> buckets_;
  std::vector<std::pair<size_t, size_t>> where_;  // param -> (bucket, slot)
  std::vector<bool> arrived_;
  bool active_ = false;  // more than one rank, or always_reduce
  bool deferred_ = false;  // set_deferred(true): hooks launch nothing
};

}  // namespace kiln
