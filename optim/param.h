// Named parameters as the optimizers see them, and the gradient utilities that work on a list of
// them: zero_grad, the global gradient norm and clipping by it (torch.nn.utils.clip_grad_norm_).
// Parameters are f32 leaf tensors with .grad, all on one device (CPU or one GPU); everything here
// updates in place, never recorded.
// Tests: tests/optim/clip_test.cpp; param_refs: tests/optim/direct_params_test.cpp.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace kiln {

struct ParamRef {
  std::string name;  // as in the model's state dict: "layer1.0.conv1.weight"
  Tensor param;
  // Excluded from weight decay when the optimizer's `no_decay_bn_bias` is on (biases, batch-norm
  // weights and biases). Set by the caller, or by mark_no_decay_1d().
  bool no_decay = false;
  // This parameter's learning rate is the optimizer's (scheduled) lr times lr_mult: PyTorch's param
  // groups with scaled lrs. Set by make_optimizer from the config's "lr_mult" (default 1).
  double lr_mult = 1.0;
};

// The parameter list of an optimizer built directly from a model, as in PyTorch
// (`kiln::SGD opt(model->parameters(), {.lr = 0.05})`; docs/library.md): every tensor given, in order.
// From plain tensors (Module::parameters()) the names are their positions, "params[0]", "params[1]",
// ... (PyTorch's optimizer state is keyed by position too); from named tensors
// (Module::named_parameters()) the model's names, which the optimizer's state_dict() keys and its
// errors then use. Weight decay applies to every tensor given, as torch.optim's does to what it is
// passed: the 1-D ones are marked no_decay (mark_no_decay_1d), which only an optimizer whose
// `no_decay_bn_bias` is turned on acts upon (default off).
std::vector<ParamRef> param_refs(const std::vector<Tensor>& params);
std::vector<ParamRef> param_refs(const std::vector<std::pair<std::string, Tensor>>& named_params);

// The usual rule: every 1-D parameter (biases, batch-norm weight and bias) is no_decay.
// Returns how many were marked.
int mark_no_decay_1d(std::vector<ParamRef>& params);

// Sets every parameter's .grad to none (the next backward writes fresh memory).
void zero_grad(const std::vector<ParamRef>& params);

// The norm of all gradients taken together, as one vector (parameters without .grad are skipped).
// norm_type: 2 (Euclidean) or infinity (largest absolute value).
double grad_norm(const std::vector<ParamRef>& params, double norm_type = 2.0);

// Scales the gradients so that their global norm is at most `max_norm`, as
// torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6), applied when coef < 1.
// Returns the norm before clipping.
// NOTE: a non-finite norm leaves the gradients untouched (PyTorch would turn every gradient into
// NaN): the step is skipped by the loss scaler or the run is diverging anyway, and the caller sees
// the non-finite return value.
double clip_grad_norm(const std::vector<ParamRef>& params, double max_norm, double norm_type = 2.0);
// The same clipping (norm type 2) without reading the norm back where reads block (a GPU: the
// coefficient is computed and applied on the device, core/optim_kernels.h, so the step can be
// captured in a CUDA graph); the same bits as clip_grad_norm. Elsewhere it is clip_grad_norm.
void clip_grad_norm_on_device(const std::vector<ParamRef>& params, double max_norm);

// The contiguous f32 data of p's gradient, on p's device (undefined when p has none). A gradient that is not
// contiguous f32 is converted once and stored back as .grad, so in-place updates reach it.
// `who` names the caller in errors ("SGD", "LossScaler").
Tensor dense_grad(const ParamRef& p, const char* who);

// Checks what every optimizer needs: unique non-empty names, defined f32 leaf tensors, contiguous, all
// on one device.
void check_params(const std::vector<ParamRef>& params, const char* who);

}  // namespace kiln
