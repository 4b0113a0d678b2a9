// Tensor: a handle (shared pointer) to {storage on one device, dtype, shape, strides, offset} plus the
// autograd fields {requires_grad, grad, grad_fn}. Copying a Tensor copies the handle, not the data.
// 4-D activations are NHWC; conv weights are (out, kh, kw, in/groups). See docs/architecture.md.
// Tests: tests/core/tensor_test.cpp.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/kernel_slot.h"

namespace kiln {

using Shape = std::vector<int64_t>;

class Node;
class Tensor;

// Storage: one block of device memory, returned to the device's caching allocator when the last
// tensor that views it goes away. `deleter` (if set) replaces the allocator (external memory).
struct Storage {
  void* data = nullptr;
  size_t bytes = 0;
  Device device;
  std::function<void(void*)> deleter;
  Storage(size_t bytes, Device device);                                     // from the allocator
  Storage(void* data, size_t bytes, Device device, std::function<void(void*)> deleter);  // external
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

using GradHook = std::function<void(const Tensor& param)>;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;  // in elements
  int64_t offset = 0;  // in elements
  DType dtype = DType::f32;
  // autograd
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<Node> grad_fn;           // set on results of recorded ops
  std::weak_ptr<Node> grad_accumulator;    // leaves: the node that accumulates into `grad`
  std::vector<GradHook> grad_ready_hooks;  // leaves: fired once per backward, after accumulation
};

int64_t shape_numel(const Shape& s);
Shape contiguous_strides(const Shape& s);

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // --- factories -------------------------------------------------------------------------------
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor ones(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32, Device device = Device::cpu());
  // Copies `values` (converted to dtype) into a new CPU tensor, then moves it to `device`.
  static Tensor from_vector(const std::vector<float>& values, const Shape& shape, DType dtype = DType::f32,
                            Device device = Device::cpu());
  static Tensor from_vector(const std::vector<double>& values, const Shape& shape, DType dtype = DType::f64,
                            Device device = Device::cpu());
  static Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape, DType dtype = DType::i64,
                            Device device = Device::cpu());
  static Tensor scalar(double value, DType dtype = DType::f32, Device device = Device::cpu());

  // --- properties ------------------------------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  const Shape& strides() const { return impl().strides; }
  int64_t offset() const { return impl().offset; }
  int64_t dim() const { return static_cast<int64_t>(impl().shape.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const { return shape_numel(impl().shape); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype()); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device; }
  bool is_contiguous() const;
  std::string str() const;  // "f32[2, 3] on cpu" for messages

  // Pointer to the first element (storage + offset). data<T>() checks T against the dtype.
  void* raw_data() const;
  template <typename T> T* data() const {
    KILN_CHECK(dtype_of<T>::value == dtype(), "tensor ", str(), " accessed as ", dtype_name(dtype_of<T>::value));
    return static_cast<T*>(raw_data());
  }
  uint16_t* data_u16() const;  // f16 / bf16 bits

  // --- conversions (not recorded by autograd unless noted) --------------------------------------
  Tensor to(Device device) const;  // copy across devices (recorded: gradient flows back)
  Tensor to(DType dtype) const;    // cast (recorded for floating types)
  Tensor contiguous() const;       // this if already contiguous, else a packed copy (recorded)
  Tensor clone() const;            // packed copy (recorded)
  Tensor detach() const;           // same storage, no autograd history
  // Values as doubles / floats / int64s in logical (row-major) order, on the host. For tests and metrics.
  std::vector<double> to_double_vector() const;
  std::vector<float> to_float_vector() const;
  std::vector<int64_t> to_int_vector() const;
  double item() const;  // one-element tensor

  // --- views (share storage; recorded by autograd) ---------------------------------------------
  Tensor reshape(const Shape& shape) const;  // a view when possible, else a copy; one dim may be -1
  Tensor view(const Shape& shape) const;     // like reshape but requires a compatible layout
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor transpose(int64_t a, int64_t b) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor flatten(int64_t start_dim = 1, int64_t end_dim = -1) const;

  // --- in place, never recorded (for optimizers, initialisers, loaders) ------------------------
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0.0); }
  Tensor& copy_(const Tensor& src);  // same shape; converts dtype and device

  // --- autograd --------------------------------------------------------------------------------
  bool requires_grad() const { return impl().requires_grad; }
  Tensor& set_requires_grad(bool r);  // only on leaves
  bool is_leaf() const { return impl().grad_fn == nullptr; }
  Tensor grad() const { return impl().grad ? Tensor(impl().grad) : Tensor(); }
  void set_grad(const Tensor& g);
  void zero_grad() { impl().grad.reset(); }  // set to none: the next backward writes fresh memory
  const std::shared_ptr<Node>& grad_fn() const { return impl().grad_fn; }
  // Runs backward from this tensor; `grad` defaults to ones for a one-element tensor.
  void backward(const Tensor& grad = Tensor()) const;
  // Called once per backward, right after this leaf's gradient is complete (data-parallel buckets).
  void register_grad_ready_hook(GradHook hook);

  TensorImpl& impl() const {
    KILN_CHECK(impl_, "use of an undefined tensor");
    return *impl_;
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& o) const { return impl_ == o.impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// A view of `base`'s storage with the given geometry (no autograd).
Tensor make_view(const Tensor& base, const Shape& shape, const Shape& strides, int64_t offset);

// Copies src into dst (same shape): any strides, any dtype pair, any devices. Not recorded.
void copy_tensor(const Tensor& dst, const Tensor& src);

// --- the kernels behind copies and fills that involve a device other than the CPU
// (core/kernel_slot.h; the CPU's are core/tensor.cpp's own loops, so the CPU fills neither).
// dst = src, any strides, any dtype pair (converted through f64, as the CPU's copy), where one of
// them is on the slot's device and the other on it, on another device of its kind, or on the CPU.
extern KernelSlot<void (*)(const Tensor& dst, const Tensor& src)> copy_kernel;
// Every element of t (any strides) = value, stored as the CPU's store() stores it.
extern KernelSlot<void (*)(const Tensor& t, double value)> fill_kernel;

}  // namespace kiln
