// The training step as a CUDA graph (train.cuda_graph: auto|on|off; docs/cuda_backend.md, "CUDA graphs").
//
// train_step (train_step.h) hands each step to the setup's StepGraph when there is one. Per batch
// shape (and whatever else a capture freezes: StepGraph::key_of), the first `warmup` steps run
// eagerly (cuDNN's algorithm search, plan caches, the scaler's device state and the optimizer's
// buffers are made there); the next is captured: zero_grad, every micro-batch's forward, loss and
// backward, read from fixed device buffers that each step fills (asynchronously, on the stream)
// with its batch before the launch, and, where update_refusal() is "", the update too (the loss
// scaler's unscale_on_device, the optimizer's step or step_unless(found_inf), update_on_device): the
// optimizer's per-step values (the learning rate; AdamW's bias corrections) are written to the device
// before each launch (Optimizer::write_step_values) and its host counts advance after it
// (note_replayed_step), its pointer tables are part of the graph (core/cuda/optim_cuda.cu), and the
// scale is read on the device; clipping is decided there too. Otherwise (the fp16 verdict read back) the update
// runs eagerly after the launch, in train_step's own code, with one line naming why. One graph at a time: a step of
// another shape (the last partial batch) runs eagerly next to it, and a shape seen `warmup` + 1 times
// in a row replaces it. A capture that fails runs that step eagerly and keeps its key eager, with
// one line naming the reason; a configuration that cannot be captured (refusal()) runs eagerly with
// one line (auto) or is an error (on).
// Tests: tests/engine/cuda_graph_test.cpp (decisions, CPU), tests/gpu/cuda_graph_test.cpp (replays).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/graph_capture.h"
#include "core/tensor.h"
#include "layers/module.h"
#include "optim/optimizer.h"

namespace kiln {

struct StepSetup;
struct StepBatch;

enum class GraphMode { off, automatic, on };

// "auto", "on", "off" -> the mode; anything else an error naming `what` and the accepted values.
GraphMode parse_graph_mode(const std::string& s, const std::string& what = "train.cuda_graph");

// Why steps of `setup` on `model` cannot be captured, or "" when they can: a device without graphs
// (the CPU), no update (AutoBatch's probe), several ranks (GradSync's all-reduce and its hooks), the
// loss read to the host each step, a dropout layer (its mask's seed is a host argument).
std::string graph_refusal(const StepSetup& setup, const Module& model);

// Why a captured step of `setup` leaves the update (unscale, verdict, clipping, the optimizer's
// step, the scaler's update) out of the graph, to run eagerly after each replay, or "" when the
// graph holds it: an fp16 verdict read back (setup.scaler_on_device false: clipping, an EMA, an
// optimizer that cannot skip on the device), an optimizer whose kernels take per-step host values
// (Optimizer::capture_refusal; none of the built-in ones). Clipping without a scaler is captured
// (clip_grad_norm_on_device).
std::string update_refusal(const StepSetup& setup, const Optimizer& opt);

struct GraphCounts {
  int64_t captures = 0;        // graphs captured
  int64_t replays = 0;         // steps run by a replay (the capturing step included)
  int64_t eager = 0;           // steps run eagerly while the mode was not off
  int64_t failed_captures = 0; // captures that failed (their steps ran eagerly)
};

class StepGraph {
 public:
  explicit StepGraph(GraphMode mode, int warmup = 2);

  GraphMode mode() const { return mode_; }
  int warmup() const { return warmup_; }
  const GraphCounts& counts() const { return counts_; }
  // Every line the graph logs ("cuda_graph: ..."); std::cout when unset.
  std::function<void(const std::string&)> log;
  // The lines logged so far (tests).
  const std::vector<std::string>& lines() const { return lines_; }

  // What a capture freezes, as text: the shapes and dtypes of the batch, the normalisation of u8
  // images, the micro-batch split, and the loss scaler's host scale (host mode) or the identity of
  // its device state (device mode); with `opt`, whether the update is captured and, when it is,
  // the optimizer's capture_identity() (its state's addresses and lr_mult). Two steps with equal keys
  // run the same captured work.
  static std::string key_of(const StepBatch& batch, const StepSetup& setup, const Optimizer* opt = nullptr);

  // --- used by train_step ---
  struct MicroOut {
    Tensor loss, logits, logits32, labels;
    int64_t size = 0;
    double share = 0;
  };
  // Whether this step replays (capturing first when it is time): false means run it eagerly. On
  // true, the gradients are in the parameters' .grad, `outs` hold each micro-batch's outputs, and
  // when update_captured() the update has been queued too. `capture` runs the micro-batches
  // (zero_grad, forward, backward) on the given batch, then the update when update_captured(), and
  // returns their outputs; it is called inside a capture only (with the optimizer's
  // set_values_written_outside on).
  bool run(const StepBatch& batch, const StepSetup& setup, const Module& model, Optimizer& opt,
           const std::function<std::vector<MicroOut>(const StepBatch&)>& capture);
  const std::vector<MicroOut>& outs() const { return outs_; }
  // Whether the graph holds the update (update_refusal() was "" at the first step).
  bool update_captured() const { return update_captured_; }

  // The decision alone, for a step of `key` (tests): "replay", "capture" or "eager".
  std::string decide(const std::string& key);

 private:
  void say(const std::string& line);
  // The first run's checks: whether this run's steps can be captured at all (refusal_), and whether
  // the update can be captured with them (update_captured_).
  void check_once(const StepSetup& setup, const Module& model, const Optimizer& opt);
  // Captures the step of `key` into a new graph (the previous one goes first), its inputs copied from
  // `batch`; false, with the key marked failed, when the capture fails.
  bool capture_step(const StepBatch& batch, const StepSetup& setup, Optimizer& opt,
                    const std::function<std::vector<MicroOut>(const StepBatch&)>& capture, const std::string& key,
                    const std::vector<Tensor>& params);
  GraphMode mode_;
  int warmup_;
  bool checked_ = false;
  std::string refusal_;
  bool update_captured_ = false;
  std::shared_ptr<CapturedWork> work_;
  std::string key_, last_key_;
  int64_t same_ = 0;
  std::set<std::string> failed_, noted_;
  Tensor in_images_, in_labels_, in_targets_;  // the graph's inputs on the device
  Tensor scaler_state_;                       // keeps the scaler's device flag alive (its identity is in the key)
  std::vector<Tensor> grads_;                 // each parameter's .grad as the graph writes it
  std::vector<MicroOut> outs_;
  GraphCounts counts_;
  std::vector<std::string> lines_;
};

}  // namespace kiln
