// The training step as a CUDA graph (see cuda_graph.h).
#include "tools/engine/cuda_graph.h"

#include <iostream>
#include <sstream>

#include "core/check.h"
#include "tools/engine/train_step.h"

namespace kiln {

GraphMode parse_graph_mode(const std::string& s, const std::string& what) {
  if (s == "auto") return GraphMode::automatic;
  if (s == "on") return GraphMode::on;
  if (s == "off") return GraphMode::off;
  KILN_CHECK(false, what, ": \"", s, "\" is not accepted; accepted: \"auto\", \"on\", \"off\"");
  return GraphMode::off;
}

namespace {

bool has_dropout(Module& m) {
  for (auto& [name, mod] : m.named_modules())
    if (mod->type() == "dropout") return true;
  return false;
}

}  // namespace

std::string graph_refusal(const StepSetup& s, const Module& model) {
  if (!s.update) return "a step without an update (the memory probe) runs eagerly";
  if (s.sync) return "several ranks: the gradients' all-reduce (NCCL) and its hooks run eagerly";
  if (s.read_loss) return "the loss is read to the host each step";
  if (has_dropout(const_cast<Module&>(model)))
    return "the model has dropout, whose mask seed is a host argument a graph would freeze";
  if (!can_capture(s.device)) return "device " + s.device.str() + " has no graphs: its steps run eagerly";
  return "";
}

std::string update_refusal(const StepSetup& s, const Optimizer& opt) {
  if (s.scaler && !s.scaler_on_device) return "the loss scaler's verdict is " + s.verdict_reason;
  const std::string why = opt.capture_refusal();
  if (!why.empty()) return why;
  return "";
}

StepGraph::StepGraph(GraphMode mode, int warmup) : mode_(mode), warmup_(warmup) {
  KILN_CHECK(warmup >= 1, "StepGraph: warmup = ", warmup, "; accepted: >= 1 (the first step of a shape runs eagerly)");
}

void StepGraph::say(const std::string& line) {
  lines_.push_back(line);
  if (log) log(line);
  else std::cout << line << "\n";
}

std::string StepGraph::key_of(const StepBatch& b, const StepSetup& s, const Optimizer* opt) {
  std::ostringstream k;
  k << "images " << b.images.str() << ", labels " << b.labels.str();
  if (b.targets.defined()) k << ", targets " << b.targets.str();
  if (b.images.dtype() == DType::u8) {
    k << ", normalize mean";
    for (double v : b.normalize.mean) k << " " << v;
    k << " std";
    for (double v : b.normalize.std) k << " " << v;
  }
  k << ", accumulate " << s.accumulate << ", compute " << dtype_name(s.compute);
  if (s.scaler) {
    // Host mode multiplies the loss by the host's scale (a kernel argument); device mode by the
    // scale tensor, which must stay the one captured.
    if (s.scaler->on_device() && s.scaler->found_inf().defined())
      k << ", scale on the device @" << s.scaler->found_inf().raw_data();
    else k << ", scale " << s.scaler->scale();
  }
  if (opt) {
    // A captured update freezes the optimizer's tables: its state's addresses and each lr_mult.
    if (update_refusal(s, *opt).empty()) k << ", update captured, " << opt->type() << " #" << std::hex << opt->capture_identity();
    else k << ", update eager";
  }
  return k.str();
}

std::string StepGraph::decide(const std::string& key) {
  if (work_ && key == key_) return "replay";
  if (failed_.count(key)) return "eager";
  if (key == last_key_) ++same_;
  else last_key_ = key, same_ = 1;
  return same_ > warmup_ ? "capture" : "eager";
}

namespace {

// Copies a batch's tensor into the graph's input (from pinned memory: queued, no wait).
void fill_input(Tensor& dst, const Tensor& src) {
  if (src.defined()) dst.copy_(src);
}

}  // namespace

void StepGraph::check_once(const StepSetup& setup, const Module& model, const Optimizer& opt) {
  if (checked_) return;
  checked_ = true;
  refusal_ = graph_refusal(setup, model);
  if (!refusal_.empty()) {
    KILN_CHECK(mode_ != GraphMode::on, "train.cuda_graph: \"on\", but this step cannot be captured: ", refusal_,
               "; accepted there: \"auto\" (such steps run eagerly) or \"off\"");
    say("cuda_graph: eager: " + refusal_);
  } else {
    const std::string why = update_refusal(setup, opt);
    update_captured_ = why.empty();
    if (!update_captured_) say("cuda_graph: the update runs eagerly after each replay: " + why);
  }
}

bool StepGraph::capture_step(const StepBatch& batch, const StepSetup& setup, Optimizer& opt,
                             const std::function<std::vector<MicroOut>(const StepBatch&)>& capture,
                             const std::string& key, const std::vector<Tensor>& params) {
  const Device d = setup.device;
  // One graph at a time: the previous one and its pool go first.
  work_.reset();
  grads_.clear();
  outs_.clear();
  scaler_state_ = Tensor();
  in_images_ = Tensor::empty(batch.images.shape(), batch.images.dtype(), d);
  in_labels_ = Tensor::empty(batch.labels.shape(), batch.labels.dtype(), d);
  in_targets_ = batch.targets.defined() ? Tensor::empty(batch.targets.shape(), batch.targets.dtype(), d) : Tensor();
  fill_input(in_images_, batch.images);
  fill_input(in_labels_, batch.labels);
  fill_input(in_targets_, batch.targets);
  std::vector<MicroOut> outs;
  try {
    begin_capture(d);
    opt.set_values_written_outside(update_captured_);
    outs = capture(StepBatch{in_images_, in_labels_, in_targets_, batch.normalize});
    opt.set_values_written_outside(false);
    work_ = end_capture(d);
  } catch (const std::exception& e) {
    opt.set_values_written_outside(false);
    abandon_capture(d);
    work_.reset();
    in_images_ = in_labels_ = in_targets_ = Tensor();
    failed_.insert(key);
    ++counts_.failed_captures;
    ++counts_.eager;
    // The parameters' .grad may hold tensors of the abandoned capture (never written): the eager
    // step's zero_grad drops them.
    say(std::string("cuda_graph: eager: the capture of this step failed (") + e.what() + "); key: " + key);
    return false;
  }
  key_ = key;
  outs_ = std::move(outs);
  grads_.clear();
  for (const Tensor& p : params) grads_.push_back(p.grad());
  if (setup.scaler && setup.scaler->on_device()) scaler_state_ = setup.scaler->found_inf();
  ++counts_.captures;
  say("cuda_graph: captured the step after " + std::to_string(warmup_) + " eager steps: " + key);
  return true;
}

bool StepGraph::run(const StepBatch& batch, const StepSetup& setup, const Module& model, Optimizer& opt,
                    const std::function<std::vector<MicroOut>(const StepBatch&)>& capture) {
  if (mode_ == GraphMode::off) return false;
  check_once(setup, model, opt);
  if (!refusal_.empty()) {
    ++counts_.eager;
    return false;
  }
  const std::string key = key_of(batch, setup, &opt);
  const std::string what = decide(key);
  if (what == "eager") {
    ++counts_.eager;
    if (work_ && noted_.insert(key).second) say("cuda_graph: eager: a step of another key than the graph's: " + key);
    return false;
  }
  std::vector<Tensor> params;
  for (const ParamRef& p : opt.params()) params.push_back(p.param);
  // The per-step values the captured update reads (the learning rate), written before the launch.
  if (update_captured_) opt.write_step_values();
  if (what == "capture") {
    if (!capture_step(batch, setup, opt, capture, key, params)) return false;
  } else {
    fill_input(in_images_, batch.images);
    fill_input(in_labels_, batch.labels);
    fill_input(in_targets_, batch.targets);
  }
  work_->replay();  // a capture runs nothing: the capturing step replays too
  // The captured update changed the scaler's device state without its calls: its getters read again.
  if (update_captured_ && setup.scaler) setup.scaler->note_device_step();
  // ... and the optimizer's host counts (AdamW's steps) advance as the captured step's.
  if (update_captured_) opt.note_replayed_step();
  // The graph wrote the gradients where it captured them; an eager step in between may have set
  // other tensors as .grad.
  for (size_t i = 0; i < params.size() && i < grads_.size(); ++i) {
    Tensor p = params[i];
    if (grads_[i].defined()) p.set_grad(grads_[i]);
    else p.zero_grad();
  }
  last_key_ = key;
  same_ = 0;
  ++counts_.replays;
  return true;
}

}  // namespace kiln
