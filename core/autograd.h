// Define-by-run autograd. Each recorded op makes a Node {edges to the nodes of its inputs, a backward
// closure}; Tensor::backward() walks the graph in reverse creation order (a ready queue keyed by the
// node's sequence number), sums the gradients that meet at a node, and accumulates into leaf .grad,
// firing each leaf's grad-ready hooks once. Ops write their backward next to their forward:
//
//   Tensor y = ...forward...;
//   return record("relu", {x}, y, [yd = y.detach()](const Tensor& gy) { return grads{relu_backward(gy, yd)}; });
//
// NOTE: a closure must not capture the op's own output with its history (a reference cycle through
// grad_fn): capture `y.detach()` instead. Tests: tests/core/autograd_test.cpp.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace kiln {

using grads = std::vector<Tensor>;
using BackwardFn = std::function<grads(const Tensor& grad_output)>;

class Node {
 public:
  Node(std::string name, uint64_t seq) : name_(std::move(name)), seq_(seq) {}
  virtual ~Node() = default;
  // Gradients for each input edge (an undefined Tensor where no gradient flows).
  virtual grads apply(const Tensor& grad_output) = 0;
  // Frees what the node saved for backward; called by the engine right after apply(), so memory
  // drops as backward proceeds. A second backward through the same graph is then an error.
  virtual void release() {}
  const std::string& name() const { return name_; }
  uint64_t seq() const { return seq_; }
  std::vector<std::shared_ptr<Node>> next;  // one per input; null where the input needs no grad
  Shape out_shape;                          // shape of the output this node produced
  DType out_dtype = DType::f32;
  Device out_device;

 private:
  std::string name_;
  uint64_t seq_;
};

uint64_t next_sequence_number();

// Grad mode: on by default, per thread.
bool grad_enabled();
void set_grad_enabled(bool on);
class NoGradGuard {
 public:
  NoGradGuard() : prev_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// True when grad mode is on and any input requires grad: the op must record a node.
bool needs_record(const std::vector<Tensor>& inputs);

// Records `out` as produced by `name` from `inputs` (undefined inputs allowed: they get no edge).
// Returns `out` with grad_fn set and requires_grad on; returns `out` unchanged when nothing
// requires grad or grad mode is off.
Tensor record(const char* name, const std::vector<Tensor>& inputs, Tensor out, BackwardFn backward);

// Runs the backward pass from `roots` with seed gradients `seeds` (same count).
void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& seeds);

// Gradient checkpointing: runs fn(inputs) without keeping its intermediate activations; in backward
// re-runs fn with the RNG state of the first run restored (dropout masks are identical) and
// back-propagates through the recomputed graph. Parameters used inside fn get their gradients as in
// the plain run.
using CheckpointFn = std::function<Tensor(const std::vector<Tensor>&)>;
Tensor checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs);

// Sum of `a` and `b` without recording (used to accumulate gradients). Either may be undefined.
Tensor accumulate(const Tensor& a, const Tensor& b);

// Reduces a broadcast gradient back to `shape` (sums over the leading dims that were added and the
// dims of size 1). Used by binary ops' backward.
Tensor sum_to_shape(const Tensor& g, const Shape& shape);

}  // namespace kiln
