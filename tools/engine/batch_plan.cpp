// The batch plan of a run (replica_run.h's plan_batch and make_run_schedule): AutoBatch
// (data.batch_size = -1) and train.accumulate = "auto" measured on this rank's device, the loaders
// of the global batch, the steps of an epoch, and the learning-rate schedule over them.
// Tests: tests/engine/autobatch_test.cpp, tests/engine/accumulate_test.cpp and the tests that train.
#include <algorithm>
#include <functional>
#include <iostream>
#include <memory>
#include <string>

#include "core/allocator.h"
#include "core/device.h"
#include "data/config.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "tools/engine/accumulate.h"
#include "tools/engine/autobatch.h"
#include "tools/engine/batch_images.h"
#include "tools/engine/mpi_comm.h"
#include "tools/engine/replica_run.h"
#include "tools/engine/train_step.h"

namespace kiln {

namespace trainer {

namespace {

// Probe with cuDNN's heuristics: benchmark mode would time every algorithm of every probe batch
// (conv plans are per batch size); training then benchmarks its own batch once.
struct BenchmarkOff {
  Device d;
  bool was;
  explicit BenchmarkOff(Device dev) : d(dev), was(conv_benchmark(dev)) { if (was) set_conv_benchmark(d, false); }
  ~BenchmarkOff() { if (was) set_conv_benchmark(d, true); }
};

// AutoBatch's probe: the peak memory of the training step's forward and backward on b random
// images (make_step_setup's StepUse::probe), plus the optimizer's state, allocated at the first step.
std::function<double(int64_t)> memory_probe(const Replica& rep, const RunConfig& cfg, const RunData& data,
                                             Learner& learner, const BatchPlan& plan, const ImageShape& shape) {
  CachingAllocator& alloc = allocator_for(rep.device);
  const double state_bytes = learner.optimizer->state_bytes();
  StepOptions so = step_options(cfg.opt());
  so.class_weights = learner.class_weights;
  so.use = StepUse::probe;
  const StepSetup setup = make_step_setup(so, rep.device, *learner.optimizer);
  return [&rep, &cfg, &data, &learner, &plan, &alloc, shape, state_bytes, setup](int64_t b) -> double {
    learner.optimizer->zero_grad();
    alloc.reset_peak();
    size_t base = alloc.stats().allocated;
    try {
      // With data.upload u8: host bytes, uploaded and normalised inside the step as in training.
      Tensor x = probe_images(b, shape, plan.upload_u8, rep.device, cfg.compute);
      Tensor y = Tensor::zeros({b}, DType::i64, rep.device);
      train_step(*learner.model, *learner.optimizer, StepBatch{x, y, Tensor(), data.dcfg.train_transforms.normalize().options()}, setup);
    } catch (const OutOfMemoryError&) {  // also TooLargeError: auto_batch reads which one it was
      learner.optimizer->zero_grad();
      throw;
    }
    double peak = static_cast<double>(alloc.stats().peak - base) + state_bytes;
    learner.optimizer->zero_grad();
    return peak;
  };
}

// train.accumulate = "auto": the smallest number of micro-batches whose micro-batch fits, the same
// on every rank.
void choose_accumulation(const Replica& rep, const RunConfig& cfg, BatchPlan& plan,
                         const std::function<double(int64_t)>& probe, double free_bytes) {
  KILN_CHECK(cfg.breq.global % rep.world == 0, "data.batch_size = ", cfg.breq.global,
             " is the global batch and must divide by the ", rep.world, " ranks");
  const AccumulationPlan ap = plan_accumulation(probe, free_bytes, cfg.opt().autobatch_fraction, cfg.breq.global / rep.world);
  // The same N on every rank: the one for the smallest micro-batch that fits.
  plan.accumulate = smallest_accumulation(cfg.breq.global / rep.world, rep.comm.all_reduce_min(ap.autobatch.batch));
  plan.autobatch_target = ap.autobatch.target_bytes;
  if (rep.show)
    std::cout << ap.report << (plan.accumulate != ap.n ? " (another rank fits less: " + std::to_string(plan.accumulate) +
                                                              " micro-batches on every rank)" : "") << "\n";
}

// data.batch_size = -1 (or a fraction): the largest batch that fits, the same on every rank.
void choose_batch(const Replica& rep, RunConfig& cfg, const RunData& data, BatchPlan& plan,
                  const std::function<double(int64_t)>& probe, double free_bytes, int sharing) {
  AutoBatchOptions ao;
  ao.fraction = cfg.breq.auto_fraction;
  ao.max_batch = std::min<int64_t>(has_own_memory(rep.device) ? 8192 : 1024, data.train_set->size() / rep.world);
  AutoBatchResult ab = auto_batch(probe, free_bytes, ao);
  int64_t per_rank = rep.comm.all_reduce_min(ab.batch);  // the same batch on every rank: the smallest
  cfg.breq.global = per_rank * rep.world * plan.accumulate;   // with train.accumulate = N: N micro-batches per rank
  plan.autobatch_target = ab.target_bytes;
  if (rep.show)
    std::cout << ab.report()
              << (rep.world > 1 ? " per rank" + std::string(sharing > 1 ? " (1/" + std::to_string(sharing) + " of the machine's free memory each)" : "") +
                                  "; global batch " + std::to_string(cfg.breq.global) + " over " + std::to_string(rep.world) + " ranks"
                              : "")
              << "\n";
}

// AutoBatch (data.batch_size = -1, or train.accumulate = "auto"): probes this rank's device, then
// puts the buffers and the random generator back as they were.
void run_autobatch(const Replica& rep, RunConfig& cfg, const RunData& data, Learner& learner, BatchPlan& plan) {
  const ImageShape shape = data.dcfg.transforms(Split::train).output_shape(data.train_set->image_shape());
  const ProbeRestore restore(*learner.model);
  const std::function<double(int64_t)> probe = memory_probe(rep, cfg, data, learner, plan, shape);
  double free_bytes = free_memory_bytes(rep.device);
  // The probes measure this rank's batch on this rank's device. A GPU is the rank's own; CPU ranks
  // of one machine share its RAM, so each plans with its share of what is free.
  // Ranks that compute in the host's memory share it (every rank of this machine); a GPU's is its own.
  const int sharing = has_own_memory(rep.device) ? 1 : (launched_by_mpirun() ? local_size() : rep.world);
  free_bytes /= sharing;
  BenchmarkOff benchmark_off(rep.device);
  if (plan.accumulate == 0) choose_accumulation(rep, cfg, plan, probe, free_bytes);
  else choose_batch(rep, cfg, data, plan, probe, free_bytes, sharing);
}

// This rank's loaders of the global batch, the steps of an epoch.
void make_loaders(const Replica& rep, const RunConfig& cfg, RunData& data, BatchPlan& plan) {
  KILN_CHECK(cfg.breq.global % rep.world == 0, "data.batch_size = ", cfg.breq.global,
             " is the global batch and must divide by the ", rep.world, " ranks");
  check_accumulation(cfg.breq.global, rep.world, plan.accumulate);
  data.dcfg.loader.batch_size = cfg.breq.global / rep.world;
  Shard shard{rep.rank, rep.world};
  LoaderOptions topt = data.dcfg.loader_options(Split::train);
  if (plan.upload_u8) topt.dtype = "u8";  // data.upload: bytes to the device (batch_images.h)
  plan.train_loader = std::make_unique<DataLoader>(data.train_set, data.dcfg.train_transforms, topt, shard);
  plan.train_loader->set_progressive_resize(data.dcfg.progressive_resize);
  plan.vopt = data.dcfg.loader_options(Split::val);
  if (data.dcfg.val_batch_size == 0) plan.vopt.batch_size = data.dcfg.loader.batch_size;
  if (plan.upload_u8) plan.vopt.dtype = "u8";
  plan.val_loader = std::make_unique<DataLoader>(data.val_set, data.dcfg.val_transforms, plan.vopt, shard);
  plan.steps_per_epoch = plan.train_loader->batches_per_epoch();
  if (cfg.opt().max_steps_per_epoch > 0) plan.steps_per_epoch = std::min(plan.steps_per_epoch, cfg.opt().max_steps_per_epoch);
  KILN_CHECK(plan.steps_per_epoch > 0, "data: the training split has ", data.train_set->size(),
             " samples, fewer than one batch of ", data.dcfg.loader.batch_size, " per rank");
}

}  // namespace

BatchPlan plan_batch(const Replica& rep, RunConfig& cfg, RunData& data, Learner& learner) {
  BatchPlan plan;
  // train.accumulate = "auto" (0): AutoBatch measures the largest micro-batch for the fixed batch.
  plan.accumulate = cfg.opt().accumulate;
  KILN_CHECK(plan.accumulate != 0 || cfg.breq.auto_fraction == 0, "config: train.accumulate = \"auto\" needs a fixed "
             "data.batch_size (the global batch to reach), not AutoBatch's; accepted: a data.batch_size > 0 with "
             "train.accumulate = \"auto\", or data.batch_size = -1 with train.accumulate = N (global batch = "
             "AutoBatch's micro-batch x ranks x N)");
  plan.upload_u8 = data.dcfg.upload_u8(has_own_memory(rep.device), cfg.opt().mixup.enabled());
  if (cfg.breq.auto_fraction > 0 || plan.accumulate == 0) run_autobatch(rep, cfg, data, learner, plan);
  make_loaders(rep, cfg, data, plan);
  return plan;
}

Schedule make_run_schedule(const RunConfig& cfg, const Learner& learner, const BatchPlan& plan) {
  Schedule sched;
  sched.context = ScheduleContext{learner.optimizer->lr(), plan.steps_per_epoch, cfg.opt().epochs};
  sched.lr = make_schedule(cfg.s.schedule, sched.context, "schedule");
  return sched;
}

}  // namespace trainer

}  // namespace kiln
