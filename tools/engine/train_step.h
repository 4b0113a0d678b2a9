// One training step, written once and shared by everything that trains or measures training: the
// trainer (tools/engine/epoch.cpp), AutoBatch's memory probe, `kiln bench train` and `kiln bench checkpoint`
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
//   (with setup.graph, train.cuda_graph: those micro-batches replayed from a CUDA graph captured once
//   per batch shape, cuda_graph.h, with the update below inside the graph too where nothing in it is
//   read back (update_refusal(): no fp16 verdict read back; clipping decided on the device), else
//   the update eagerly after the replay)
//   then (setup.update): with a loss scaler, unscale and check the gradients (and the loss, when read)
//   and skip a non-finite step; clip the gradient norm; optimizer step; scaler update. With
//   setup.scaler_on_device the check and the skip happen on the device (nothing is read back).
// A non-finite loss without a scaler takes no step and returns finite = false: the caller, which
// knows the epoch and step, reports it.
//
// setup.read_loss reads each micro-batch's loss to the host (free on the CPU; a device sync on a
// GPU, where the trainer accumulates its statistics on the device instead, through `on_micro`).
//
// make_step_setup(options, device, optimizer) builds the setup, the one rule every caller uses (the
// trainer, AutoBatch's probe, both benches, the GPU tests): the compute dtype of the precision, an fp16
// loss scaler and whether its verdict stays on the device, clipping, label smoothing, class weights,
// accumulation, whether the loss is read. Where a caller means to differ it says so in
// StepOptions::use (the benches never read the loss; the probe takes no step).
// Tests: tests/engine/train_step_test.cpp.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/tensor.h"
#include "data/normalize.h"
#include "layers/module.h"
#include "optim/grad_sync.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"
#include "tools/engine/train_options.h"
#include "tools/engine/cuda_graph.h"

namespace kiln {

struct StepBatch {
  Tensor images;   // (N, H, W, C), any device and dtype: moved to setup.device, cast to setup.compute;
                   // u8 images (data.upload) are normalised there with `normalize` (batch_images.h)
  Tensor labels;   // (N) i64, any device
  Tensor targets;  // optional (N, K) f32 soft targets (MixUp/CutMix, label smoothing already in them)
  NormalizeOptions normalize = {};  // u8 images only: the loader batch's mean and std (Batch::normalize)
};

struct StepSetup {
  Device device = Device::cpu();
  DType compute = DType::f32;
  double label_smoothing = 0;  // hard labels only (soft targets carry their own)
  Tensor class_weights;        // optional (K) f32 on `device`
  int64_t accumulate = 1;      // micro-batches per step
  double clip_grad_norm = 0;   // 0: no clipping
  std::shared_ptr<LossScaler> scaler;  // fp16 dynamic loss scaling (copies of a setup share it)
  // The scaler's verdict stays on the device (LossScaler's device mode, the optimizer's
  // step_unless): a GPU step then reads nothing back. Needs an optimizer that can_skip_on_device()
  // (clipping is decided on the device too); the caller learns the skips from the scaler's getters.
  bool scaler_on_device = false;
  std::string verdict_reason;    // make_step_setup: why the verdict stays on the device or is read back
  GradSync* sync = nullptr;      // data-parallel gradient all-reduce
  bool read_loss = true;         // read each micro-batch's loss to the host (StepResult::loss)
  bool update = true;            // false: forward and backward only (AutoBatch's probe)
  // train.cuda_graph (cuda_graph.h): the micro-batches captured once per batch shape and replayed,
  // the update inside the graph or eager after it (update_refusal); null: every step eager (off, the
  // CPU, the probe). Shared by copies.
  std::shared_ptr<StepGraph> graph;
};

// How a caller uses the step: the one place where the trainer, the benches and the probe differ.
enum class StepUse {
  train,  // the trainer: each micro-batch's loss read where reading does not block (the CPU); the update
  time,   // the benches (kiln bench train, kiln bench checkpoint): the trainer's step, but the loss is never
          // read, so that a step is timed or measured alone
  probe,  // AutoBatch's memory probe: the forward and backward of one micro-batch alone: no update, no
          // loss read, no loss scaler, no all-reduce
};

// What make_step_setup builds a setup from: the run's train.* choices, resolved, and what only the
// caller has (class weights counted on its data, its ranks' all-reduce).
struct StepOptions {
  std::string precision = "fp32";  // train.precision ("auto" resolved for the device); fp16 adds a loss scaler
  double label_smoothing = 0;      // train.label_smoothing
  Tensor class_weights;            // train.class_weights resolved: (K) f32 on the device, or undefined
  int64_t accumulate = 1;          // micro-batches per step (train.accumulate, "auto" resolved)
  double clip_grad_norm = 0;       // train.clip_grad_norm; 0: no clipping
  LossScalerOptions loss_scaler;   // train.loss_scaler
  GradSync* sync = nullptr;        // several ranks: the gradients' all-reduce
  std::string cuda_graph = "off";  // train.cuda_graph: "auto", "on" or "off" (cuda_graph.h)
  StepUse use = StepUse::train;
};

// The step options of a run's train section (precision, label smoothing, accumulation, clipping,
// EMA, loss scaler); the caller adds class weights and the all-reduce.
StepOptions step_options(const TrainOptions& train);

// The setup of every step of `options.use`, on `device`, with `opt`: the compute dtype of the
// precision; with f16 (and an update) a loss scaler of options.loss_scaler whose verdict stays on
// the device where nothing would otherwise be read back there (a device whose reads block, an
// optimizer that can skip its step on the device; clipping is decided there too, and the EMA follows the
// verdict there: WeightEma::update's skip), with the reason in
// verdict_reason; the loss read each micro-batch only by StepUse::train where reading is free; a
// StepGraph where options.cuda_graph is not "off" and the device has graphs ("on" on a device
// without them, the CPU, is an error).
StepSetup make_step_setup(const StepOptions& options, Device device, const Optimizer& opt);

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
