// One training step, written once and shared by everything that trains or measures training: the
// trainer (tools/engine/trainer.cpp), AutoBatch's memory probe, `kiln bench train` and `kiln bench checkpoint`
// (tools/cli/bench.cpp, tools/cli/bench_memory.cpp). Before it, each carried its own copy, and the copies had
// drifted (the probe left out label smoothing and class weights, bench train spelled fp16 scaling its
// own way).
//
// train_step(model, opt, batch, setup):
//   zero the gradients;
//   for each micro-batch (train.accumulate, tools/engine/accumulate.h; one when accumulate = 1):
//     forward on the images in setup.compute on setup.device; the loss in f32 (soft cross-entropy
//     against batch.targets when MixUp/CutMix made them, else cross-entropy with label smoothing and
//     class weights), weighted by the micro-batch's share of the batch; backward, scaled by the fp16
//     loss scaler when there is one; GradSync (several ranks) defers its all-reduce until the last
//     micro-batch, then finish();
//   then (setup.update): with a loss scaler, unscale and check the gradients (and the loss, when read)
//   and skip a non-finite step; clip the gradient norm; optimizer step; scaler update. With
//   setup.scaler_on_device the check and the skip happen on the device (nothing is read back).
// A non-finite loss without a scaler takes no step and returns finite = false: the caller, which
// knows the epoch and step, reports it.
//
// setup.read_loss reads each micro-batch's loss to the host (free on the CPU; a device sync on a
// GPU, where the trainer accumulates its statistics on the device instead, through `on_micro`).
// Tests: tests/engine/train_step_test.cpp.
#pragma once
#include <cstdint>
#include <functional>

#include "core/tensor.h"
#include "layers/module.h"
#include "optim/grad_sync.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"

namespace kiln {

struct StepBatch {
  Tensor images;   // (N, H, W, C), any device and dtype: moved to setup.device, cast to setup.compute
  Tensor labels;   // (N) i64, any device
  Tensor targets;  // optional (N, K) f32 soft targets (MixUp/CutMix, label smoothing already in them)
};

struct StepSetup {
  Device device = Device::cpu();
  DType compute = DType::f32;
  double label_smoothing = 0;  // hard labels only (soft targets carry their own)
  Tensor class_weights;        // optional (K) f32 on `device`
  int64_t accumulate = 1;      // micro-batches per step
  double clip_grad_norm = 0;   // 0: no clipping
  LossScaler* scaler = nullptr;  // fp16 dynamic loss scaling
  // The scaler's verdict stays on the device (LossScaler's device mode, the optimizer's
  // step_unless): a GPU step then reads nothing back. Needs an optimizer that can_skip_on_device()
  // and no clipping (the norm is read back); the caller learns the skips from the scaler's getters.
  bool scaler_on_device = false;
  GradSync* sync = nullptr;      // data-parallel gradient all-reduce
  bool read_loss = true;         // read each micro-batch's loss to the host (StepResult::loss)
  bool update = true;            // false: forward and backward only (AutoBatch's probe)
};

// What a micro-batch produced, for the caller's statistics (on_micro).
struct MicroBatchOut {
  const Tensor& loss;      // f32 scalar on the device, unweighted
  const Tensor& logits;    // the model's output (compute dtype)
  const Tensor& logits32;  // the same in f32
  const Tensor& labels;    // (n) i64 on the device
  int64_t size;            // n
  double share;            // n / the batch's size
  int64_t index;           // 0-based micro-batch number
};

struct StepResult {
  bool stepped = false;  // the optimizer took the step (true when the verdict stayed on the device)
  bool finite = true;    // the loss read (read_loss) and, with a scaler, the gradients were finite
  bool verdict_on_device = false;  // scaler_on_device: finite/stepped unknown here, the scaler counts skips
  double loss = 0;       // with read_loss: the batch's loss (micro-batch losses weighted by share)
  Tensor last_loss;      // the last micro-batch's loss (device), e.g. to wait for the step
};

StepResult train_step(Module& model, Optimizer& opt, const StepBatch& batch, const StepSetup& setup,
                      const std::function<void(const MicroBatchOut&)>& on_micro = {});

}  // namespace kiln
