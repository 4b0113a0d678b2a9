#include "core/tensor.h"

#include <cmath>
#include <cstring>
#include <numeric>

#include "core/allocator.h"
#include "core/autograd.h"

namespace kiln {

KILN_DEFINE_KERNEL_SLOT(copy);
KILN_DEFINE_KERNEL_SLOT(fill);

// ---------------------------------------------------------------------------------------------
// Storage
Storage::Storage(size_t n, Device d) : bytes(n), device(d) { data = allocator_for(d).allocate(n); }
Storage::Storage(void* p, size_t n, Device d, std::function<void(void*)> del)
    : data(p), bytes(n), device(d), deleter(std::move(del)) {}
Storage::~Storage() {
  if (deleter) deleter(data);
  else allocator_for(device).deallocate(data, bytes);
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (int64_t i = static_cast<int64_t>(s.size()) - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

// ---------------------------------------------------------------------------------------------
// Factories
Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape) KILN_CHECK(d >= 0, "Tensor::empty: negative size in shape ", shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype), device);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(0.0);
  return t;
}
Tensor Tensor::ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }
Tensor Tensor::full(const Shape& shape, double v, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(v);
  return t;
}
Tensor Tensor::scalar(double v, DType dtype, Device device) { return full({}, v, dtype, device); }

namespace {
// Element access by dtype, through double (exact for every dtype but i64 beyond 2^53).
inline double load(const void* base, DType t, int64_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(base)[i];
    case DType::f64: return static_cast<const double*>(base)[i];
    case DType::f16: return f16_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::bf16: return bf16_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::i32: return static_cast<const int32_t*>(base)[i];
    case DType::i64: return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case DType::u8: return static_cast<const uint8_t*>(base)[i];
  }
  return 0;
}
inline void store(void* base, DType t, int64_t i, double v) {
  switch (t) {
    case DType::f32: static_cast<float*>(base)[i] = static_cast<float>(v); break;
    case DType::f64: static_cast<double*>(base)[i] = v; break;
    case DType::f16: static_cast<uint16_t*>(base)[i] = float_to_f16(static_cast<float>(v)); break;
    case DType::bf16: static_cast<uint16_t*>(base)[i] = float_to_bf16(static_cast<float>(v)); break;
    case DType::i32: static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v); break;
    case DType::i64: static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v); break;
    case DType::u8: static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(v); break;
  }
}

// Calls row(dst_offset, src_offset, inner, dst_step, src_step) for the start of every innermost row
// of `shape` (a row: `inner` elements, dst_step/src_step apart), in row-major order.
template <typename F>
void for_each_row(const Shape& shape, const Shape& dst_st, const Shape& src_st, F row) {
  int64_t n = shape_numel(shape);
  if (n == 0) return;
  int64_t nd = static_cast<int64_t>(shape.size());
  if (nd == 0) {
    row(0, 0, 1, 0, 0);
    return;
  }
  const int64_t inner = shape[nd - 1], ds = dst_st[nd - 1], ss = src_st[nd - 1];
  int64_t outer = n / inner;
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t o = 0; o < outer; ++o) {
    int64_t rem = o, doff = 0, soff = 0;
    for (int64_t d = nd - 2; d >= 0; --d) {
      int64_t idx = rem % shape[d];
      rem /= shape[d];
      doff += idx * dst_st[d];
      soff += idx * src_st[d];
    }
    row(doff, soff, inner, ds, ss);
  }
}

// Calls f(dst_index, src_index) for every element, in row-major order of `shape`.
template <typename F>
void for_each_index(const Shape& shape, const Shape& dst_st, const Shape& src_st, F f) {
  for_each_row(shape, dst_st, src_st, [&](int64_t doff, int64_t soff, int64_t inner, int64_t ds, int64_t ss) {
    for (int64_t i = 0; i < inner; ++i) f(doff + i * ds, soff + i * ss);
  });
}

// A strided copy between tensors of one dtype, as U (an unsigned integer of the element's size: the
// bits move unchanged, NaN payloads included); rows contiguous on both sides are one memmove each.
// Slices, concatenations and their backwards (e.g. ResNet's option-A shortcut on bf16) land here.
template <typename U>
void copy_same_dtype(void* d, const void* s, const Shape& shape, const Shape& dst_st, const Shape& src_st) {
  U* dp = static_cast<U*>(d);
  const U* sp = static_cast<const U*>(s);
  for_each_row(shape, dst_st, src_st, [&](int64_t doff, int64_t soff, int64_t inner, int64_t ds, int64_t ss) {
    if (ds == 1 && ss == 1) {
      std::memmove(dp + doff, sp + soff, static_cast<size_t>(inner) * sizeof(U));
    } else {
      for (int64_t i = 0; i < inner; ++i) dp[doff + i * ds] = sp[soff + i * ss];
    }
  });
}

template <typename T>
Tensor from_values(const std::vector<T>& v, const Shape& shape, DType dtype, Device device) {
  KILN_CHECK(static_cast<int64_t>(v.size()) == shape_numel(shape), "Tensor::from_vector: ", v.size(),
             " values for shape ", shape_str(shape));
  Tensor t = Tensor::empty(shape, dtype, Device::cpu());
  void* p = t.raw_data();
  for (size_t i = 0; i < v.size(); ++i) store(p, dtype, static_cast<int64_t>(i), static_cast<double>(v[i]));
  return device.is_cpu() ? t : t.to(device);
}
}  // namespace

Tensor Tensor::from_vector(const std::vector<float>& v, const Shape& s, DType t, Device d) { return from_values(v, s, t, d); }
Tensor Tensor::from_vector(const std::vector<double>& v, const Shape& s, DType t, Device d) { return from_values(v, s, t, d); }
Tensor Tensor::from_vector(const std::vector<int64_t>& v, const Shape& s, DType t, Device d) {
  KILN_CHECK(static_cast<int64_t>(v.size()) == shape_numel(s), "Tensor::from_vector: ", v.size(),
             " values for shape ", shape_str(s));
  Tensor c = Tensor::empty(s, t, Device::cpu());
  if (t == DType::i64) std::memcpy(c.raw_data(), v.data(), v.size() * 8);
  else for (size_t i = 0; i < v.size(); ++i) store(c.raw_data(), t, static_cast<int64_t>(i), static_cast<double>(v[i]));
  return d.is_cpu() ? c : c.to(d);
}

// ---------------------------------------------------------------------------------------------
// Properties
int64_t Tensor::size(int64_t d) const {
  int64_t n = dim();
  if (d < 0) d += n;
  KILN_CHECK(d >= 0 && d < n, "dimension ", d, " out of range for tensor ", str());
  return impl().shape[d];
}

bool Tensor::is_contiguous() const {
  const auto& s = impl().shape;
  const auto& st = impl().strides;
  int64_t expect = 1;
  for (int64_t i = static_cast<int64_t>(s.size()) - 1; i >= 0; --i) {
    if (s[i] != 1 && st[i] != expect) return false;
    expect *= s[i];
  }
  return true;
}

std::string Tensor::str() const {
  if (!defined()) return "<undefined>";
  return std::string(dtype_name(dtype())) + shape_str(shape()) + " on " + device().str();
}

void* Tensor::raw_data() const {
  return static_cast<char*>(impl().storage->data) + impl().offset * static_cast<int64_t>(dtype_size(dtype()));
}

uint16_t* Tensor::data_u16() const {
  KILN_CHECK(dtype() == DType::f16 || dtype() == DType::bf16, "tensor ", str(), " accessed as 16-bit float");
  return static_cast<uint16_t*>(raw_data());
}

// ---------------------------------------------------------------------------------------------
// Copies
void copy_tensor(const Tensor& dst, const Tensor& src) {
  KILN_CHECK(dst.shape() == src.shape(), "copy: shape ", shape_str(src.shape()), " into ", shape_str(dst.shape()));
  if (!dst.device().is_cpu() || !src.device().is_cpu()) {  // the other device's copy kernel (e.g. to/from a GPU)
    const Device d = dst.device().is_cpu() ? src.device() : dst.device();
    check_available(d, "copy");
    copy_kernel.get(d)(dst, src);
    return;
  }
  DType dt = dst.dtype(), st = src.dtype();
  int64_t n = dst.numel();
  if (n == 0) return;
  void* d = dst.raw_data();
  const void* s = src.raw_data();
  if (dst.is_contiguous() && src.is_contiguous()) {
    if (dt == st) {
      std::memmove(d, s, static_cast<size_t>(n) * dtype_size(dt));
      return;
    }
    // Hot conversions for mixed precision get tight loops.
    if (st == DType::f32 && dt == DType::bf16) {
      const float* sp = static_cast<const float*>(s);
      uint16_t* dp = static_cast<uint16_t*>(d);
#pragma omp parallel for simd if (n > 65536)
      for (int64_t i = 0; i < n; ++i) dp[i] = float_to_bf16(sp[i]);
      return;
    }
    if (st == DType::bf16 && dt == DType::f32) {
      const uint16_t* sp = static_cast<const uint16_t*>(s);
      float* dp = static_cast<float*>(d);
#pragma omp parallel for simd if (n > 65536)
      for (int64_t i = 0; i < n; ++i) dp[i] = bf16_to_float(sp[i]);
      return;
    }
#pragma omp parallel for if (n > 65536)
    for (int64_t i = 0; i < n; ++i) store(d, dt, i, load(s, st, i));
    return;
  }
  if (dt == st) {
    switch (dtype_size(dt)) {
      case 1: return copy_same_dtype<uint8_t>(d, s, dst.shape(), dst.strides(), src.strides());
      case 2: return copy_same_dtype<uint16_t>(d, s, dst.shape(), dst.strides(), src.strides());
      case 4: return copy_same_dtype<uint32_t>(d, s, dst.shape(), dst.strides(), src.strides());
      case 8: return copy_same_dtype<uint64_t>(d, s, dst.shape(), dst.strides(), src.strides());
      default: break;
    }
  }
  for_each_index(dst.shape(), dst.strides(), src.strides(),
                 [&](int64_t di, int64_t si) { store(d, dt, di, load(s, st, si)); });
}

Tensor& Tensor::copy_(const Tensor& src) {
  copy_tensor(*this, src);
  return *this;
}

Tensor& Tensor::fill_(double v) {
  if (!device().is_cpu()) {  // the device's fill kernel (a GPU's: core/cuda/copy_cuda.cu)
    fill_kernel.get(device(), "fill_")(*this, v);
    return *this;
  }
  int64_t n = numel();
  if (is_contiguous()) {
    void* p = raw_data();
    if (dtype() == DType::f32) {
      float* fp = static_cast<float*>(p);
      float fv = static_cast<float>(v);
#pragma omp parallel for simd if (n > 65536)
      for (int64_t i = 0; i < n; ++i) fp[i] = fv;
    } else if (v == 0.0) {
      std::memset(p, 0, nbytes());
    } else {
      for (int64_t i = 0; i < n; ++i) store(p, dtype(), i, v);
    }
    return *this;
  }
  void* p = raw_data();
  DType t = dtype();
  for_each_index(shape(), strides(), strides(), [&](int64_t di, int64_t) { store(p, t, di, v); });
  return *this;
}

Tensor Tensor::to(Device device) const {
  if (device == this->device()) return *this;
  Tensor out = Tensor::empty(shape(), dtype(), device);
  copy_tensor(out, *this);
  Device src = this->device();
  return record("to_device", {*this}, out, [src](const Tensor& g) { return grads{g.to(src)}; });
}

Tensor Tensor::to(DType t) const {
  if (t == dtype()) return *this;
  Tensor out = Tensor::empty(shape(), t, device());
  copy_tensor(out, *this);
  if (!is_floating(t) || !is_floating(dtype())) return out;
  DType src = dtype();
  return record("to_dtype", {*this}, out, [src](const Tensor& g) { return grads{g.to(src)}; });
}

Tensor Tensor::clone() const {
  Tensor out = Tensor::empty(shape(), dtype(), device());
  copy_tensor(out, *this);
  return record("clone", {*this}, out, [](const Tensor& g) { return grads{g}; });
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = this->impl().storage;
  impl->shape = shape();
  impl->strides = strides();
  impl->offset = offset();
  impl->dtype = dtype();
  return Tensor(std::move(impl));
}

std::vector<double> Tensor::to_double_vector() const {
  Tensor c = device().is_cpu() ? *this : detach().to(Device::cpu());
  std::vector<double> out(static_cast<size_t>(numel()));
  const void* s = c.raw_data();
  DType t = c.dtype();
  Shape dst_st = contiguous_strides(shape());
  for_each_index(shape(), dst_st, c.strides(), [&](int64_t di, int64_t si) { out[di] = load(s, t, si); });
  return out;
}

std::vector<float> Tensor::to_float_vector() const {
  auto d = to_double_vector();
  return std::vector<float>(d.begin(), d.end());
}

std::vector<int64_t> Tensor::to_int_vector() const {
  if (dtype() == DType::i64) {
    Tensor c = detach().to(Device::cpu()).contiguous();
    const int64_t* p = c.data<int64_t>();
    return std::vector<int64_t>(p, p + numel());
  }
  auto d = to_double_vector();
  std::vector<int64_t> out(d.size());
  for (size_t i = 0; i < d.size(); ++i) out[i] = static_cast<int64_t>(d[i]);
  return out;
}

double Tensor::item() const {
  KILN_CHECK(numel() == 1, "item(): tensor ", str(), " has ", numel(), " elements, expected 1");
  return to_double_vector()[0];
}

// ---------------------------------------------------------------------------------------------
// Views
Tensor make_view(const Tensor& base, const Shape& shape, const Shape& strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.impl().storage;
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

static Shape infer_shape(const Shape& req, int64_t numel, const Tensor& t) {
  Shape s = req;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      KILN_CHECK(infer < 0, "reshape of ", t.str(), " to ", shape_str(req), ": only one dimension can be -1");
      infer = static_cast<int64_t>(i);
    } else {
      KILN_CHECK(s[i] >= 0, "reshape of ", t.str(), " to ", shape_str(req), ": negative size");
      known *= s[i];
    }
  }
  if (infer >= 0) {
    KILN_CHECK(known > 0 && numel % known == 0, "reshape of ", t.str(), " to ", shape_str(req), ": sizes do not divide");
    s[infer] = numel / known;
  }
  KILN_CHECK(shape_numel(s) == numel, "reshape of ", t.str(), " to ", shape_str(req), ": ", numel,
             " elements do not fit ", shape_str(s));
  return s;
}

Tensor Tensor::view(const Shape& req) const {
  Shape s = infer_shape(req, numel(), *this);
  KILN_CHECK(is_contiguous(), "view of non-contiguous tensor ", str(), " as ", shape_str(s), "; use reshape()");
  Tensor out = make_view(*this, s, contiguous_strides(s), offset());
  Shape in_shape = shape();
  return record("view", {*this}, out, [in_shape](const Tensor& g) { return grads{g.reshape(in_shape)}; });
}

Tensor Tensor::reshape(const Shape& req) const { return is_contiguous() ? view(req) : contiguous().view(req); }

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  int64_t n = dim();
  KILN_CHECK(static_cast<int64_t>(dims.size()) == n, "permute of ", str(), ": ", dims.size(), " dims given");
  Shape s(n), st(n);
  std::vector<int64_t> inv(n, -1);
  for (int64_t i = 0; i < n; ++i) {
    int64_t d = dims[i] < 0 ? dims[i] + n : dims[i];
    KILN_CHECK(d >= 0 && d < n && inv[d] < 0, "permute of ", str(), ": invalid dims ", shape_str(dims));
    inv[d] = i;
    s[i] = shape()[d];
    st[i] = strides()[d];
  }
  Tensor out = make_view(*this, s, st, offset());
  return record("permute", {*this}, out, [inv](const Tensor& g) { return grads{g.permute(inv)}; });
}

Tensor Tensor::transpose(int64_t a, int64_t b) const {
  int64_t n = dim();
  std::vector<int64_t> dims(n);
  std::iota(dims.begin(), dims.end(), 0);
  if (a < 0) a += n;
  if (b < 0) b += n;
  KILN_CHECK(a >= 0 && a < n && b >= 0 && b < n, "transpose of ", str(), ": dims ", a, ", ", b, " out of range");
  std::swap(dims[a], dims[b]);
  return permute(dims);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  int64_t n = dim();
  if (d < 0) d += n;
  KILN_CHECK(d >= 0 && d < n, "slice of ", str(), ": dim out of range");
  KILN_CHECK(step >= 1, "slice of ", str(), ": step must be >= 1");
  int64_t len = shape()[d];
  if (start < 0) start += len;
  if (end < 0) end += len;
  end = std::min(end, len);
  KILN_CHECK(start >= 0 && start <= end, "slice of ", str(), " along dim ", d, ": range [", start, ", ", end,
             ") is invalid");
  Shape s = shape(), st = strides();
  s[d] = (end - start + step - 1) / step;
  st[d] *= step;
  Tensor out = make_view(*this, s, st, offset() + start * strides()[d]);
  Shape in_shape = shape();
  return record("slice", {*this}, out, [in_shape, d, start, end, step](const Tensor& g) {
    Tensor gi = Tensor::zeros(in_shape, g.dtype(), g.device());
    copy_tensor(gi.slice(d, start, end, step), g);
    return grads{gi};
  });
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  int64_t n = dim();
  if (start_dim < 0) start_dim += n;
  if (end_dim < 0) end_dim += n;
  KILN_CHECK(start_dim >= 0 && start_dim <= end_dim && end_dim < n, "flatten of ", str(), ": dims ", start_dim, "..",
             end_dim, " out of range");
  Shape s;
  for (int64_t i = 0; i < start_dim; ++i) s.push_back(shape()[i]);
  int64_t m = 1;
  for (int64_t i = start_dim; i <= end_dim; ++i) m *= shape()[i];
  s.push_back(m);
  for (int64_t i = end_dim + 1; i < n; ++i) s.push_back(shape()[i]);
  return reshape(s);
}

// ---------------------------------------------------------------------------------------------
// Autograd fields
Tensor& Tensor::set_requires_grad(bool r) {
  KILN_CHECK(is_leaf(), "set_requires_grad on a non-leaf tensor ", str(), " (it has grad_fn ", grad_fn()->name(), ")");
  KILN_CHECK(!r || is_floating(dtype()), "only floating tensors can require grad, not ", str());
  impl().requires_grad = r;
  return *this;
}

void Tensor::set_grad(const Tensor& g) {
  if (!g.defined()) {
    impl().grad.reset();
    return;
  }
  KILN_CHECK(g.shape() == shape(), "set_grad: gradient ", g.str(), " for tensor ", str());
  impl().grad = g.impl_ptr();
}

void Tensor::backward(const Tensor& grad) const {
  Tensor seed = grad;
  if (!seed.defined()) {
    KILN_CHECK(numel() == 1, "backward() without a gradient needs a one-element tensor, not ", str());
    seed = Tensor::ones(shape(), dtype(), device());
  }
  run_backward({*this}, {seed});
}

void Tensor::register_grad_ready_hook(GradHook hook) {
  KILN_CHECK(is_leaf() && requires_grad(), "grad-ready hooks go on leaf tensors that require grad, not ", str());
  impl().grad_ready_hooks.push_back(std::move(hook));
}

}  // namespace kiln
