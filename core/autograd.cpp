#include "core/autograd.h"

#include <queue>
#include <unordered_map>

#include "core/ops/elementwise.h"
#include "core/ops/reduce.h"
#include "core/rng.h"

namespace kiln {

namespace {
thread_local bool g_grad_enabled = true;
std::atomic<uint64_t> g_seq{0};

class FunctionNode : public Node {
 public:
  FunctionNode(const char* name, BackwardFn fn) : Node(name, next_sequence_number()), fn_(std::move(fn)) {}
  grads apply(const Tensor& g) override {
    KILN_CHECK(fn_, "backward through the graph of '", name(), "' a second time: its saved tensors were freed");
    return fn_(g);
  }
  void release() override { fn_ = nullptr; }

 private:
  BackwardFn fn_;
};

// The node behind a leaf that requires grad: sums into .grad, then fires the leaf's hooks.
// Runs as soon as it is ready (highest priority), so hooks fire while backward is still going.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf)
      : Node("AccumulateGrad", UINT64_MAX), leaf_(leaf) {}
  grads apply(const Tensor& g) override {
    auto leaf = leaf_.lock();
    if (!leaf) return {};
    Tensor t(leaf);
    // NOTE: store a private copy: `g` may be shared with other gradients, and optimizers,
    // all-reduce and clipping update .grad in place.
    Tensor gc = g.dtype() == t.dtype() ? g.detach() : g.detach().to(t.dtype());
    if (leaf->grad) t.set_grad(accumulate(Tensor(leaf->grad), gc));
    else t.set_grad(gc.impl().storage == g.impl().storage ? gc.clone() : gc);
    for (auto& hook : leaf->grad_ready_hooks) hook(t);
    return {};
  }

 private:
  std::weak_ptr<TensorImpl> leaf_;
};

std::shared_ptr<Node> edge_for(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return nullptr;
  TensorImpl& impl = t.impl();
  if (impl.grad_fn) return impl.grad_fn;
  auto acc = impl.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    impl.grad_accumulator = acc;
  }
  return acc;
}
}  // namespace

uint64_t next_sequence_number() { return g_seq.fetch_add(1); }
bool grad_enabled() { return g_grad_enabled; }
void set_grad_enabled(bool on) { g_grad_enabled = on; }

bool needs_record(const std::vector<Tensor>& inputs) {
  if (!g_grad_enabled) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Tensor record(const char* name, const std::vector<Tensor>& inputs, Tensor out, BackwardFn backward) {
  if (!needs_record(inputs)) return out;
  auto node = std::make_shared<FunctionNode>(name, std::move(backward));
  node->next.reserve(inputs.size());
  for (const Tensor& t : inputs) node->next.push_back(edge_for(t));
  node->out_shape = out.shape();
  node->out_dtype = out.dtype();
  node->out_device = out.device();
  // `out` is fresh from the op; if it is a view of an input, give it its own impl.
  if (out.impl().grad_fn || out.impl().requires_grad) out = out.detach();
  out.impl().grad_fn = node;
  out.impl().requires_grad = true;
  return out;
}

Tensor accumulate(const Tensor& a, const Tensor& b) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  NoGradGuard ng;
  return ops::add(a, b);
}

Tensor sum_to_shape(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  NoGradGuard ng;
  int64_t lead = g.dim() - static_cast<int64_t>(shape.size());
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < g.dim(); ++i) {
    if (i < lead) dims.push_back(i);
    else if (shape[i - lead] == 1 && g.shape()[i] != 1) dims.push_back(i);
  }
  Tensor r = dims.empty() ? g : ops::sum(g, dims, /*keepdim=*/true);
  return r.reshape(shape);
}

void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& seeds) {
  KILN_CHECK(roots.size() == seeds.size(), "backward: ", roots.size(), " roots but ", seeds.size(), " gradients");
  NoGradGuard ng;  // backward closures are not themselves recorded (no double backward)
  // 1. Count, for each node reachable from the roots, how many edges point at it.
  std::unordered_map<Node*, int> deps;
  std::unordered_map<Node*, Tensor> buffer;
  std::vector<Node*> stack;
  auto root_node = [](const Tensor& r) -> std::shared_ptr<Node> { return edge_for(r); };
  for (const Tensor& r : roots) {
    KILN_CHECK(r.requires_grad(), "backward on tensor ", r.str(), " that does not require grad");
    Node* n = root_node(r).get();
    if (deps.emplace(n, 0).second) stack.push_back(n);
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (auto& nx : n->next) {
      if (!nx) continue;
      auto [it, inserted] = deps.emplace(nx.get(), 0);
      ++it->second;
      if (inserted) stack.push_back(nx.get());
    }
  }
  // 2. Seed and walk: a node runs when every edge into it has delivered; later nodes first.
  auto cmp = [](Node* a, Node* b) { return a->seq() < b->seq(); };
  std::priority_queue<Node*, std::vector<Node*>, decltype(cmp)> ready(cmp);
  std::vector<std::shared_ptr<Node>> keep_alive;
  for (size_t i = 0; i < roots.size(); ++i) {
    auto n = root_node(roots[i]);
    keep_alive.push_back(n);
    KILN_CHECK(seeds[i].shape() == roots[i].shape(), "backward: gradient ", seeds[i].str(), " for output ",
               roots[i].str());
    buffer[n.get()] = accumulate(buffer[n.get()], seeds[i]);
  }
  for (auto& n : keep_alive)
    if (deps[n.get()] == 0) {
      deps[n.get()] = -1;  // queued
      ready.push(n.get());
    }
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    Tensor g = std::move(buffer[n]);
    buffer.erase(n);
    grads in = g.defined() ? n->apply(g) : grads{};
    n->release();
    for (size_t i = 0; i < n->next.size(); ++i) {
      Node* nx = n->next[i].get();
      if (!nx) continue;
      if (i < in.size() && in[i].defined()) buffer[nx] = accumulate(buffer[nx], in[i]);
      if (--deps[nx] == 0) ready.push(nx);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Gradient checkpointing
namespace {
class CheckpointNode : public Node {
 public:
  CheckpointNode(CheckpointFn fn, std::vector<Tensor> inputs, RngState rng)
      : Node("checkpoint", next_sequence_number()), fn_(std::move(fn)), inputs_(std::move(inputs)), rng_(rng) {}

  void release() override {
    inputs_.clear();
    released_ = true;
  }
  grads apply(const Tensor& g) override {
    KILN_CHECK(!released_, "backward through a checkpoint a second time: its saved inputs were freed");
    // Re-run the segment with grad on, from detached copies of the saved inputs.
    std::vector<Tensor> xs;
    for (const Tensor& t : inputs_) {
      if (!t.defined()) {
        xs.push_back(t);
        continue;
      }
      Tensor d = t.detach();
      if (t.requires_grad()) d.set_requires_grad(true);
      xs.push_back(d);
    }
    Generator& gen = default_generator();
    RngState after = gen.state();
    gen.set_state(rng_);
    Tensor out;
    {
      struct Restore {
        bool prev;
        ~Restore() { set_grad_enabled(prev); }
      } restore{grad_enabled()};
      set_grad_enabled(true);
      out = fn_(xs);
    }
    gen.set_state(after);
    grads result(xs.size());
    if (out.requires_grad()) {
      run_backward({out}, {g});
      for (size_t i = 0; i < xs.size(); ++i)
        if (xs[i].defined() && xs[i].requires_grad()) result[i] = xs[i].grad();
    }
    return result;
  }

 private:
  CheckpointFn fn_;
  std::vector<Tensor> inputs_;
  RngState rng_;
  bool released_ = false;
};
}  // namespace

Tensor checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs) {
  RngState rng = default_generator().state();
  Tensor out;
  {
    NoGradGuard ng;
    out = fn(inputs);
  }
  // Parameters inside fn are not inputs here, so record whenever grad mode is on: the recompute
  // reaches them. (A segment whose inputs and parameters all lack grad simply yields no gradients.)
  if (!grad_enabled()) return out;
  std::vector<Tensor> saved;
  for (const Tensor& t : inputs) saved.push_back(t.defined() ? t : Tensor());
  auto node = std::make_shared<CheckpointNode>(fn, saved, rng);
  for (const Tensor& t : inputs) node->next.push_back(edge_for(t));
  node->out_shape = out.shape();
  node->out_dtype = out.dtype();
  node->out_device = out.device();
  out = out.detach();
  out.impl().grad_fn = node;
  out.impl().requires_grad = true;
  return out;
}

}  // namespace kiln
