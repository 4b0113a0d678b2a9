// One training step (see train_step.h).
#include "tools/engine/train_step.h"

#include "core/device.h"  // reads_block

#include <cmath>
#include <vector>

#include "core/check.h"
#include "core/ops/elementwise.h"
#include "optim/param.h"
#include "tools/engine/accumulate.h"
#include "tools/engine/batch_images.h"

namespace kiln {

namespace {

// Whether an fp16 step's verdict (skip or step) can stay on `device`, and why (or why not).
bool verdict_on_device(const StepOptions& o, Device device, const Optimizer& opt, std::string* why) {
  if (!reads_block(device)) *why = "read back: reading from " + device.str() + " is free";
  else if (!opt.can_skip_on_device())
    *why = "read back: " + opt.type() + " steps on the host's verdict (sgd skips its step on the device)";
  else {
    *why = "on the device: the step reads nothing back";
    return true;
  }
  return false;
}

}  // namespace

StepOptions step_options(const TrainOptions& t) {
  StepOptions o;
  o.precision = t.precision;
  o.loss = t.loss;
  o.label_smoothing = t.label_smoothing;
  o.accumulate = t.accumulate;
  o.clip_grad_norm = t.clip_grad_norm;
  o.loss_scaler = t.loss_scaler;
  o.cuda_graph = t.cuda_graph;
  return o;
}

StepSetup make_step_setup(const StepOptions& o, Device device, const Optimizer& opt) {
  StepSetup s;
  s.device = device;
  s.compute = compute_dtype_of(o.precision, device);
  s.label_smoothing = o.label_smoothing;
  s.class_weights = o.class_weights;
  s.loss = make_loss(o.loss, LossContext{o.label_smoothing, o.class_weights});
  if (o.use == StepUse::probe) {  // one micro-batch's forward and backward: the memory a step needs
    s.read_loss = false;
    s.update = false;
    return s;
  }
  const GraphMode graph = parse_graph_mode(o.cuda_graph, "train.cuda_graph");
  if (graph != GraphMode::off) {
    KILN_CHECK(graph != GraphMode::on || can_capture(device), "train.cuda_graph: \"on\" needs a CUDA device; ",
               device.str(), " has no graphs; accepted there: \"auto\" (eager there) or \"off\"");
    if (can_capture(device)) s.graph = std::make_shared<StepGraph>(graph);
  }
  s.accumulate = o.accumulate;
  s.clip_grad_norm = o.clip_grad_norm;
  s.sync = o.sync;
  // Free on the host; elsewhere the trainer keeps its statistics on the device (train_step.h).
  s.read_loss = o.use == StepUse::train && !reads_block(device);
  if (s.compute == DType::f16) {
    s.scaler = std::make_shared<LossScaler>(o.loss_scaler);
    s.scaler_on_device = verdict_on_device(o, device, opt, &s.verdict_reason);
  }
  return s;
}

namespace {

// zero_grad, then each micro-batch's forward, loss and backward; the loss summed into *loss_sum
// (read_loss) and each micro-batch's outputs handed to `on_micro`.
void micro_batches(Module& model, Optimizer& opt, const StepBatch& batch, const StepSetup& setup,
                   const std::function<void(const MicroBatchOut&)>& on_micro, double* loss_sum, Tensor* last_loss) {
  const int64_t n = batch.images.size(0);
  opt.zero_grad();
  const std::vector<int64_t> micro = micro_batch_sizes(n, setup.accumulate);
  const bool whole = micro.size() == 1;
  int64_t start = 0;
  for (size_t k = 0; k < micro.size(); start += micro[k], ++k) {
    const int64_t m = micro[k];
    auto part_of = [&](const Tensor& t) { return whole ? t : t.slice(0, start, start + m).contiguous(); };
    Tensor x = device_images(part_of(batch.images), batch.normalize, setup.device, setup.compute);
    Tensor y = part_of(batch.labels).to(setup.device);
    Tensor logits = model.forward(x);
    Tensor logits32 = logits.to(DType::f32);  // softmax and the loss in f32 whatever the compute dtype
    const Tensor targets = batch.targets.defined() ? part_of(batch.targets).to(setup.device) : y;
    Tensor loss = setup.loss ? setup.loss(logits32, targets)
                             : cross_entropy_loss(logits32, targets, {setup.label_smoothing, setup.class_weights});
    const double share = static_cast<double>(m) / static_cast<double>(n);
    Tensor part = whole ? loss : ops::mul_scalar(loss, share);
    if (setup.sync) setup.sync->set_deferred(k + 1 < micro.size());
    (setup.scaler ? setup.scaler->scale_loss(part) : part).backward();
    if (setup.read_loss) *loss_sum += loss.item() * share;
    if (on_micro) on_micro(MicroBatchOut{loss, logits, logits32, y, m, share, static_cast<int64_t>(k)});
    *last_loss = loss;
  }
  if (setup.sync) setup.sync->finish();
}

// The step's update once the gradients are in .grad (see train_step.h).
StepResult update(Optimizer& opt, const StepSetup& setup, StepResult r) {
  const bool loss_finite = !setup.read_loss || std::isfinite(r.loss);
  if (!setup.update) {
    r.finite = loss_finite;
    return r;
  }
  const std::vector<ParamRef>& params = opt.params();
  if (setup.scaler && setup.scaler_on_device) {
    // The verdict stays where the gradients are: the optimizer's kernels read the flag, the
    // scaler's update runs there; the scaler's getters tell the skips when asked.
    KILN_CHECK(opt.can_skip_on_device(), "train_step: scaler_on_device needs an optimizer that skips its step on ",
               "the device (sgd); ", opt.type(), " reads the loss scaler's verdict instead");
    setup.scaler->unscale_on_device(params);
    // Clipping decided on the device too: a non-finite norm (a step about to be skipped) clips
    // nothing, and the skipped step's gradients are not used.
    if (setup.clip_grad_norm > 0) clip_grad_norm_on_device(params, setup.clip_grad_norm);
    opt.step_unless(setup.scaler->found_inf());
    setup.scaler->update_on_device();
    r.finite = loss_finite;
    r.stepped = true;
    r.verdict_on_device = true;
    return r;
  }
  if (setup.scaler) {
    // A non-finite loss or gradient skips the step and backs the scale off; the scaler aborts after
    // loss_scaler.max_nonfinite_steps such steps in a row. Without read_loss (a GPU) the gradients'
    // check alone decides: a non-finite loss has non-finite gradients.
    r.finite = setup.scaler->unscale_and_check(params) && loss_finite;
    if (r.finite) {
      if (setup.clip_grad_norm > 0) clip_grad_norm(params, setup.clip_grad_norm);
      opt.step();
      r.stepped = true;
    }
    setup.scaler->update(!r.finite);
    return r;
  }
  r.finite = loss_finite;
  if (!r.finite) return r;  // the caller reports it, with the epoch and step
  // decided on the device where reads block (the same bits): nothing read back, so it can be captured
  if (setup.clip_grad_norm > 0) clip_grad_norm_on_device(params, setup.clip_grad_norm);
  opt.step();
  r.stepped = true;
  return r;
}

}  // namespace

StepResult train_step(Module& model, Optimizer& opt, const StepBatch& batch, const StepSetup& setup,
                      const std::function<void(const MicroBatchOut&)>& on_micro) {
  const int64_t n = batch.images.size(0);
  KILN_CHECK(n > 0 && batch.labels.numel() == n, "train_step: ", n, " images and ", batch.labels.numel(), " labels");
  KILN_CHECK(setup.accumulate >= 1, "train_step: accumulate = ", setup.accumulate, "; accepted: >= 1");
  StepResult r;
  if (setup.graph) {
    // train.cuda_graph (cuda_graph.h): the micro-batches replayed from a graph, and the update with
    // them where the graph holds it (update_captured()), else eagerly after the replay.
    auto capture = [&](const StepBatch& fixed) {
      std::vector<StepGraph::MicroOut> outs;
      double unused = 0;
      Tensor last;
      StepSetup s = setup;
      s.read_loss = false;  // graph_refusal: a step that reads its loss is not captured
      micro_batches(model, opt, fixed, s, [&](const MicroBatchOut& mo) {
        outs.push_back({mo.loss.detach(), mo.logits.detach(), mo.logits32.detach(), mo.labels, mo.size, mo.share});
      }, &unused, &last);
      if (setup.graph->update_captured()) update(opt, s, StepResult{});
      return outs;
    };
    if (setup.graph->run(batch, setup, model, opt, capture)) {
      const auto& outs = setup.graph->outs();
      for (size_t k = 0; k < outs.size(); ++k) {
        const auto& o = outs[k];
        if (on_micro) on_micro(MicroBatchOut{o.loss, o.logits, o.logits32, o.labels, o.size, o.share,
                                             static_cast<int64_t>(k)});
      }
      if (!outs.empty()) r.last_loss = outs.back().loss;
      if (!setup.graph->update_captured()) return update(opt, setup, r);
      // What update() returns for a step that reads nothing back (the loss is not read in a graph).
      r.finite = true;
      r.stepped = true;
      r.verdict_on_device = setup.scaler != nullptr;
      return r;
    }
  }
  micro_batches(model, opt, batch, setup, on_micro, &r.loss, &r.last_loss);
  return update(opt, setup, r);
}

}  // namespace kiln
