// Optimizer updates and loss-scaler checks over every parameter in one kernel launch. The host
// builds a table {pointers, size, per-tensor scalars, first chunk} for all tensors, uploads it once
// (runtime.h's upload()), and each block walks 16K-element chunks, finding its tensor by binary
// search over the chunks' prefix sums. Math in f32 as PyTorch's single-tensor f32 path. The
// learning rate of SGD and LARS is read from a device scalar when the optimizer gives one (its
// device_lr(): the same kernels eager and in a CUDA graph, so both give the same bits); a table
// queued while the stream is being captured goes into the graph itself (upload_table). LARS adds
// two launches before its step: per-chunk partial norms and one trust ratio per tensor, on the device.
// Tests: tests/gpu/optim_test.cpp, tests/gpu/lars_test.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/cuda/cuda_ops.h"
#include "core/cuda/kernel_util.cuh"
#include "core/cuda/reduce_util.cuh"

namespace kiln::cuda {
namespace {

constexpr int64_t kChunk = 16384;
constexpr int kThreads = 256;

struct Entry {
  void* ptr[5] = {nullptr, nullptr, nullptr, nullptr, nullptr};  // {param, grad, buffers...} or {tensor}
  int64_t n = 0;
  int64_t chunk_begin = 0;
  float f[4] = {0, 0, 0, 0};  // per kernel: learning rate, weight decay, ...
  double mult = 1.0;          // SGD, LARS with a device lr: the entry's lr is float(*lr * mult)
  int32_t flag = 0;           // SGD: momentum buffer not initialised yet
  int32_t dtype = 0;          // dtype of ptr[1] (gradients may be f16/bf16) or of ptr[0] (unscale)
};

__device__ int find_entry(const Entry* table, int count, int64_t chunk) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {  // the last entry whose chunk_begin <= chunk
    int mid = (lo + hi + 1) / 2;
    if (table[mid].chunk_begin <= chunk) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

__device__ __forceinline__ float load_any(const void* p, int dtype, int64_t i) {
  if (dtype == static_cast<int>(DType::f16)) return to_float(static_cast<const __half*>(p)[i]);
  if (dtype == static_cast<int>(DType::bf16)) return to_float(static_cast<const __nv_bfloat16*>(p)[i]);
  return static_cast<const float*>(p)[i];
}
__device__ __forceinline__ void store_any(void* p, int dtype, int64_t i, float v) {
  if (dtype == static_cast<int>(DType::f16)) static_cast<__half*>(p)[i] = from_float<__half>(v);
  else if (dtype == static_cast<int>(DType::bf16)) static_cast<__nv_bfloat16*>(p)[i] = from_float<__nv_bfloat16>(v);
  else static_cast<float*>(p)[i] = v;
}

// body(entry, i) for every element of every tensor.
template <typename Body>
__global__ void multi_tensor_kernel(const Entry* table, int count, int64_t total_chunks, Body body) {
  for (int64_t c = blockIdx.x; c < total_chunks; c += gridDim.x) {
    const Entry e = table[find_entry(table, count, c)];  // a register copy: no reloads after stores
    int64_t start = (c - e.chunk_begin) * kChunk, end = min(e.n, start + kChunk);
    for (int64_t i = start + threadIdx.x; i < end; i += blockDim.x) body(e, i);
  }
}

// The entry's learning rate: float(base * mult) from the device scalar, or the host's f[0].
__device__ __forceinline__ float entry_lr(const Entry& e, const double* lr) {
  return lr ? static_cast<float>(*lr * e.mult) : e.f[0];
}

struct SgdBody {
  float momentum, dampening;
  bool nesterov;
  const int32_t* skip;  // the loss scaler's found-inf flag, or null: nonzero leaves everything as it is
  const double* lr;     // the base learning rate on the device, or null: f[0]
  __device__ void operator()(const Entry& e, int64_t i) const {
    if (skip && *skip) return;
    float* p = static_cast<float*>(e.ptr[0]);
    float g = load_any(e.ptr[1], e.dtype, i);
    float w = p[i];
    if (e.f[1] != 0.f) g += e.f[1] * w;
    if (momentum != 0.f) {
      float* buf = static_cast<float*>(e.ptr[2]);
      float b = e.flag ? g : momentum * buf[i] + (1.f - dampening) * g;
      buf[i] = b;
      g = nesterov ? g + momentum * b : b;
    }
    p[i] = w - entry_lr(e, lr) * g;
  }
};

// f = {decay factor 1 - lr*wd, step size lr/(1-b1^t), sqrt(1-b2^t), unused}
// c1 = 1 - beta1 and c2 = 1 - beta2 are taken in double on the host (as the CPU kernel does):
// 1.f - 0.999f is 1.3e-5 away from 0.001, which would put exp_avg_sq off by that much relative.
// With `values` (the optimizer's per-step values on the device), f is read from row e.flag there.
struct AdamWBody {
  float beta1, beta2, c1, c2, eps;
  const float* values;
  __device__ void operator()(const Entry& e, int64_t i) const {
    const float* f = values ? values + 3 * static_cast<int64_t>(e.flag) : e.f;
    float* p = static_cast<float*>(e.ptr[0]);
    float* m = static_cast<float*>(e.ptr[2]);
    float* v = static_cast<float*>(e.ptr[3]);
    float g = load_any(e.ptr[1], e.dtype, i);
    float w = p[i] * f[0];
    float mi = beta1 * m[i] + c1 * g;
    float vi = beta2 * v[i] + c2 * g * g;
    m[i] = mi;
    v[i] = vi;
    if (e.ptr[4]) {  // amsgrad: the running maximum of v is used instead of v
      float* vmax = static_cast<float*>(e.ptr[4]);
      vi = fmaxf(vmax[i], vi);
      vmax[i] = vi;
    }
    p[i] = w - f[1] * mi / (sqrtf(vi) / f[2] + eps);
  }
};

struct UnscaleBody {
  float inv_scale;
  int32_t* flag;
  const double* state;  // the scaler's state on the device (core/loss_scale_rule.h), or null: inv_scale
  __device__ void operator()(const Entry& e, int64_t i) const {
    const float inv = state ? static_cast<float>(1.0 / state[kScale]) : inv_scale;
    float g = load_any(e.ptr[0], e.dtype, i);
    float s = g * inv;
    if (!isfinite(g) || !isfinite(s)) *flag = 1;  // benign race: every writer stores 1
    store_any(e.ptr[0], e.dtype, i, s);
  }
};

__global__ void sumsq_kernel(const Entry* table, int count, int64_t total_chunks, float* partial) {
  for (int64_t c = blockIdx.x; c < total_chunks; c += gridDim.x) {
    const Entry e = table[find_entry(table, count, c)];  // a register copy: no reloads after stores
    int64_t start = (c - e.chunk_begin) * kChunk, end = min(e.n, start + kChunk);
    float acc = 0.f;
    for (int64_t i = start + threadIdx.x; i < end; i += blockDim.x) {
      float v = load_any(e.ptr[0], e.dtype, i);
      acc += v * v;
    }
    acc = block_combine<SumCombine>(acc);
    if (threadIdx.x == 0) partial[c] = acc;
  }
}

// LARS, first launch: per chunk, sum p^2 and g^2 of the entries that adapt (flag = 1), into
// partial[2c], partial[2c + 1] (0 for the others).
__global__ void lars_norms_kernel(const Entry* table, int count, int64_t total_chunks, float* partial) {
  for (int64_t c = blockIdx.x; c < total_chunks; c += gridDim.x) {
    const Entry e = table[find_entry(table, count, c)];
    float pp = 0.f, gg = 0.f;
    if (e.flag) {
      const float* p = static_cast<const float*>(e.ptr[0]);
      int64_t start = (c - e.chunk_begin) * kChunk, end = min(e.n, start + kChunk);
      for (int64_t i = start + threadIdx.x; i < end; i += blockDim.x) {
        float w = p[i], g = load_any(e.ptr[1], e.dtype, i);
        pp += w * w;
        gg += g * g;
      }
    }
    pp = block_combine<SumCombine>(pp);
    gg = block_combine<SumCombine>(gg);
    if (threadIdx.x == 0) {
      partial[2 * c] = pp;
      partial[2 * c + 1] = gg;
    }
  }
}

// Second launch, one block per entry: its chunks' partials summed in f64, then the trust ratio
// eta * ||p|| / (||g|| + wd * ||p|| + epsilon), 1 when either norm is 0 or the entry does not adapt.
// f[1] is the entry's weight decay.
__global__ void lars_trust_kernel(const Entry* table, int count, int64_t total_chunks, const float* partial,
                                  float* trust, double eta, double epsilon) {
  const int k = blockIdx.x;
  const Entry e = table[k];
  const int64_t end = k + 1 < count ? table[k + 1].chunk_begin : total_chunks;
  double pp = 0, gg = 0;
  for (int64_t c = e.chunk_begin + threadIdx.x; c < end; c += blockDim.x) {
    pp += partial[2 * c];
    gg += partial[2 * c + 1];
  }
  __shared__ double s_pp[kThreads], s_gg[kThreads];
  s_pp[threadIdx.x] = pp;
  s_gg[threadIdx.x] = gg;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) {
      s_pp[threadIdx.x] += s_pp[threadIdx.x + o];
      s_gg[threadIdx.x] += s_gg[threadIdx.x + o];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const double wn = sqrt(s_pp[0]), gn = sqrt(s_gg[0]);
    const bool scaled = e.flag && wn > 0 && gn > 0;
    trust[k] = scaled ? static_cast<float>(eta * wn / (gn + static_cast<double>(e.f[1]) * wn + epsilon)) : 1.f;
  }
}

// Third launch: the step, f = {lr, weight decay}, the entry's trust ratio read from `trust`.
__global__ void lars_apply_kernel(const Entry* table, int count, int64_t total_chunks, const float* trust,
                                  float momentum, bool nesterov, const int32_t* skip, const double* lr) {
  if (skip && *skip) return;
  for (int64_t c = blockIdx.x; c < total_chunks; c += gridDim.x) {
    const int k = find_entry(table, count, c);
    const Entry e = table[k];
    const float scaled_lr = entry_lr(e, lr) * trust[k];
    float* p = static_cast<float*>(e.ptr[0]);
    float* buf = static_cast<float*>(e.ptr[2]);
    int64_t start = (c - e.chunk_begin) * kChunk, end = min(e.n, start + kChunk);
    for (int64_t i = start + threadIdx.x; i < end; i += blockDim.x) {
      float d = load_any(e.ptr[1], e.dtype, i);
      const float w = p[i];
      if (e.f[1] != 0.f) d += e.f[1] * w;
      const float step = scaled_lr * d;
      const float b = momentum * buf[i] + step;
      buf[i] = b;
      p[i] = nesterov ? w - (momentum * b + step) : w - b;
    }
  }
}

// A table queued while the device's stream is being captured into a CUDA graph (core/graph_capture.h)
// cannot go through upload(): the graph would copy from upload()'s pinned staging ring at each
// replay, after later uploads have overwritten it (and a pageable copy is not allowed in a capture).
// Its bytes go into the graph instead, as the by-value arguments of small kernels (at most 4 KiB of
// arguments each) that write them into a buffer of the capture's pool: each replay writes the same
// bytes again, in stream order, before the kernels that read them.
constexpr int kTableBytesPerLaunch = 3968;
struct TableBytes {
  unsigned char b[kTableBytesPerLaunch];
};
__global__ void write_table_kernel(unsigned char* dst, TableBytes src, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src.b[i];
}

bool capturing(int device) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream_of(device), &st));
  return st != cudaStreamCaptureStatusNone;
}

// Clipping on the device: the coefficient from the f64 sum of squares (one thread), then every
// gradient scaled by it where clipping applies (a finite norm and coef < 1), as the host decides it.
__global__ void clip_coef_kernel(const double* sumsq, double max_norm, float* coef, int32_t* apply) {
  const double norm = sqrt(*sumsq);
  const double c = max_norm / (norm + 1e-6);
  const bool on = isfinite(norm) && c < 1.0;
  *apply = on ? 1 : 0;
  *coef = on ? static_cast<float>(c) : 1.f;
}

struct ScaleByBody {
  const float* coef;
  const int32_t* apply;
  __device__ void operator()(const Entry& e, int64_t i) const {
    if (!*apply) return;
    store_any(e.ptr[0], e.dtype, i, load_any(e.ptr[0], e.dtype, i) * *coef);
  }
};

// Host side: the table and its launch.
struct Table {
  std::vector<Entry> entries;
  mutable std::vector<Tensor> keep;  // packed copies (and a captured table) that must live until the kernels are queued
  int64_t chunks = 0;
  int device = -1;

  void add(Entry e) {
    if (e.n == 0) return;
    e.chunk_begin = chunks;
    chunks += (e.n + kChunk - 1) / kChunk;
    entries.push_back(e);
  }
  const Entry* upload_table() const {
    const size_t bytes = entries.size() * sizeof(Entry);
    if (!capturing(device)) return static_cast<const Entry*>(upload(device, entries.data(), bytes));
    Tensor buf = Tensor::empty({static_cast<int64_t>(bytes)}, DType::u8, Device::cuda(device));
    keep.push_back(buf);
    auto* dst = static_cast<unsigned char*>(buf.raw_data());
    const auto* src = reinterpret_cast<const unsigned char*>(entries.data());
    for (size_t at = 0; at < bytes; at += kTableBytesPerLaunch) {
      const int n = static_cast<int>(std::min<size_t>(kTableBytesPerLaunch, bytes - at));
      TableBytes part;
      std::memcpy(part.b, src + at, static_cast<size_t>(n));
      write_table_kernel<<<1, kThreads, 0, stream_of(device)>>>(dst + at, part, n);
      CUDA_CHECK_LAUNCH();
    }
    return reinterpret_cast<const Entry*>(dst);
  }
  int grid() const { return static_cast<int>(std::min<int64_t>(chunks, int64_t(context(device).sm_count) * 8)); }
  // One launch of body(entry, i) over every element of every tensor.
  template <typename Body>
  void launch(Body body) const {
    DeviceGuard g(device);
    const Entry* table = upload_table();
    multi_tensor_kernel<<<grid(), kThreads, 0, stream_of(device)>>>(table, static_cast<int>(entries.size()), chunks,
                                                                    body);
    CUDA_CHECK_LAUNCH();
  }
  // Adds a plain tensor (unscale, sum of squares): ptr[0] = its data, dtype its own.
  void add_tensor(const char* op, const Tensor& x);
};

void check_f32_buffer(const char* op, const char* what, const Tensor& t, const Tensor& param) {
  KILN_CHECK(t.defined(), op, ": missing ", what, " for parameter ", param.str());
  KILN_CHECK(t.dtype() == DType::f32 && t.is_contiguous() && t.shape() == param.shape(), op, ": ", what, " ", t.str(),
             " must be a packed f32 tensor shaped like the parameter ", param.str());
}

int check_float_dtype(const char* op, const Tensor& t) {
  KILN_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::f16 || t.dtype() == DType::bf16, op,
             ": gradients must be f32, f16 or bf16, got ", t.str());
  return static_cast<int>(t.dtype());
}

void Table::add_tensor(const char* op, const Tensor& x) {
  int d = same_device(op, {&x});
  KILN_CHECK(device < 0 || device == d, op, ": all tensors must be on one device, got ", Device::cuda(device).str(),
             " and ", x.str());
  device = d;
  Tensor p = packed(x);  // x itself when packed, so in-place kernels write into x
  keep.push_back(p);
  Entry e;
  e.ptr[0] = p.raw_data();
  e.n = p.numel();
  e.dtype = check_float_dtype(op, p);
  add(e);
}

// Common checks of a (param, grad) pair; returns the table entry with ptr[0..1] set.
Entry param_entry(const char* op, Table& t, const Tensor& param, const Tensor& grad) {
  KILN_CHECK(param.defined() && grad.defined(), op, ": every entry needs a parameter and its gradient");
  int d = same_device(op, {&param, &grad});
  KILN_CHECK(t.device < 0 || t.device == d, op, ": all parameters must be on one device, got ", Device::cuda(t.device).str(),
             " and ", param.str());
  t.device = d;
  KILN_CHECK(param.dtype() == DType::f32 && param.is_contiguous(), op, ": parameter ", param.str(),
             " must be a packed f32 tensor (the master weights)");
  KILN_CHECK(grad.shape() == param.shape(), op, ": gradient ", grad.str(), " for parameter ", param.str());
  Tensor g = packed(grad);
  t.keep.push_back(g);
  Entry e;
  e.ptr[0] = param.raw_data();
  e.ptr[1] = g.raw_data();
  e.n = param.numel();
  e.dtype = check_float_dtype(op, g);
  return e;
}

}  // namespace

// The loss scaler's device-side skip flag (i32 [] on the parameters' GPU), or null without one.
const int32_t* skip_flag(const char* op, const Tensor& skip, int device) {
  if (!skip.defined()) return nullptr;
  KILN_CHECK(skip.dtype() == DType::i32 && skip.numel() == 1, op, ": skip must be i32 [], got ", skip.str());
  KILN_CHECK(skip.device() == Device::cuda(device), op, ": skip ", skip.str(), " must be on ",
             Device::cuda(device).str(), " with the parameters");
  return static_cast<const int32_t*>(skip.raw_data());
}

// The optimizer's base learning rate on the device (f64 [] on the parameters' GPU), or null without one.
const double* lr_scalar(const char* op, const Tensor& lr, int device) {
  if (!lr.defined()) return nullptr;
  KILN_CHECK(lr.dtype() == DType::f64 && lr.numel() == 1, op, ": lr must be f64 [], got ", lr.str());
  KILN_CHECK(lr.device() == Device::cuda(device), op, ": lr ", lr.str(), " must be on ", Device::cuda(device).str(),
             " with the parameters");
  return static_cast<const double*>(lr.raw_data());
}

void sgd_step(const std::vector<SgdEntry>& entries, const SgdOptions& opt) {
  const char* op = "sgd_step";
  KILN_CHECK(opt.momentum >= 0.0 && opt.dampening >= 0.0, op, ": momentum and dampening must be >= 0");
  KILN_CHECK(!opt.nesterov || (opt.momentum > 0.0 && opt.dampening == 0.0), op,
             ": nesterov needs momentum > 0 and no dampening");
  Table t;
  for (const SgdEntry& s : entries) {
    Entry e = param_entry(op, t, s.param, s.grad);
    if (opt.momentum != 0.0) {
      check_f32_buffer(op, "momentum buffer", s.momentum_buffer, s.param);
      same_device(op, {&s.param, &s.momentum_buffer});
      e.ptr[2] = s.momentum_buffer.raw_data();
    }
    e.f[0] = static_cast<float>(s.lr);
    e.f[1] = static_cast<float>(s.weight_decay);
    e.mult = s.lr_mult;
    e.flag = s.first_step ? 1 : 0;
    t.add(e);
  }
  if (t.chunks == 0) return;
  const int32_t* skip = skip_flag(op, opt.skip, t.device);
  const double* lr = lr_scalar(op, opt.lr, t.device);
  t.launch(SgdBody{static_cast<float>(opt.momentum), static_cast<float>(opt.dampening), opt.nesterov, skip, lr});
}

void lars_step(const std::vector<LarsEntry>& entries, const LarsOptions& opt) {
  const char* op = "lars_step";
  KILN_CHECK(opt.momentum >= 0.0 && opt.eta > 0.0 && opt.epsilon >= 0.0, op,
             ": momentum and epsilon must be >= 0 and eta > 0, got ", opt.momentum, ", ", opt.eta, ", ", opt.epsilon);
  Table t;
  for (const LarsEntry& s : entries) {
    Entry e = param_entry(op, t, s.param, s.grad);
    check_f32_buffer(op, "momentum buffer", s.momentum_buffer, s.param);
    same_device(op, {&s.param, &s.momentum_buffer});
    e.ptr[2] = s.momentum_buffer.raw_data();
    e.f[0] = static_cast<float>(s.lr);
    e.f[1] = static_cast<float>(s.weight_decay);
    e.mult = s.lr_mult;
    e.flag = s.adapt ? 1 : 0;
    t.add(e);
  }
  if (t.chunks == 0) return;
  const int32_t* skip = skip_flag(op, opt.skip, t.device);
  const double* lr = lr_scalar(op, opt.lr, t.device);
  // NOTE: the norms stay on the device (partials, then one trust ratio per tensor): nothing is read
  // back, so the step queues behind the backward pass without the host waiting for it.
  DeviceGuard guard(t.device);
  const int count = static_cast<int>(t.entries.size());
  Tensor partial = Tensor::empty({2 * t.chunks}, DType::f32, Device::cuda(t.device));
  Tensor trust = Tensor::empty({count}, DType::f32, Device::cuda(t.device));
  const Entry* table = t.upload_table();
  cudaStream_t stream = stream_of(t.device);
  lars_norms_kernel<<<t.grid(), kThreads, 0, stream>>>(table, count, t.chunks, static_cast<float*>(partial.raw_data()));
  CUDA_CHECK_LAUNCH();
  lars_trust_kernel<<<count, kThreads, 0, stream>>>(table, count, t.chunks, static_cast<const float*>(partial.raw_data()),
                                                    static_cast<float*>(trust.raw_data()), opt.eta, opt.epsilon);
  CUDA_CHECK_LAUNCH();
  lars_apply_kernel<<<t.grid(), kThreads, 0, stream>>>(table, count, t.chunks, static_cast<const float*>(trust.raw_data()),
                                                       static_cast<float>(opt.momentum), opt.nesterov, skip, lr);
  CUDA_CHECK_LAUNCH();
}

void adamw_step(const std::vector<AdamWEntry>& entries, const AdamWOptions& opt) {
  const char* op = "adamw_step";
  KILN_CHECK(opt.beta1 >= 0.0 && opt.beta1 < 1.0 && opt.beta2 >= 0.0 && opt.beta2 < 1.0, op,
             ": betas must be in [0, 1), got ", opt.beta1, ", ", opt.beta2);
  Table t;
  for (const AdamWEntry& a : entries) {
    Entry e = param_entry(op, t, a.param, a.grad);
    check_f32_buffer(op, "exp_avg", a.exp_avg, a.param);
    check_f32_buffer(op, "exp_avg_sq", a.exp_avg_sq, a.param);
    same_device(op, {&a.param, &a.exp_avg, &a.exp_avg_sq});
    KILN_CHECK(a.step >= 1, op, ": step counts from 1, got ", a.step);
    e.ptr[2] = a.exp_avg.raw_data();
    e.ptr[3] = a.exp_avg_sq.raw_data();
    if (a.max_exp_avg_sq.defined()) {
      check_f32_buffer(op, "max_exp_avg_sq", a.max_exp_avg_sq, a.param);
      same_device(op, {&a.param, &a.max_exp_avg_sq});
      e.ptr[4] = a.max_exp_avg_sq.raw_data();
    }
    double bc1 = 1.0 - std::pow(opt.beta1, static_cast<double>(a.step));
    double bc2 = 1.0 - std::pow(opt.beta2, static_cast<double>(a.step));
    e.f[0] = static_cast<float>(1.0 - a.lr * a.weight_decay);
    e.f[1] = static_cast<float>(a.lr / bc1);
    e.f[2] = static_cast<float>(std::sqrt(bc2));
    if (opt.values.defined()) {
      KILN_CHECK(a.row >= 0 && a.row < opt.values.size(0), op, ": row ", a.row, " outside the values ", opt.values.str());
      e.flag = static_cast<int32_t>(a.row);
    }
    t.add(e);
  }
  if (t.chunks == 0) return;
  const float* values = nullptr;
  if (opt.values.defined()) {
    KILN_CHECK(opt.values.dtype() == DType::f32 && opt.values.dim() == 2 && opt.values.size(1) == 3 &&
                   opt.values.is_contiguous() && opt.values.device() == Device::cuda(t.device),
               op, ": values must be packed f32 (P, 3) on ", Device::cuda(t.device).str(), ", got ", opt.values.str());
    values = static_cast<const float*>(opt.values.raw_data());
  }
  t.launch(AdamWBody{static_cast<float>(opt.beta1), static_cast<float>(opt.beta2), static_cast<float>(1.0 - opt.beta1),
                     static_cast<float>(1.0 - opt.beta2), static_cast<float>(opt.eps), values});
}

void write_values(const Tensor& dst, const std::vector<float>& values) {
  const char* op = "write_values";
  KILN_CHECK(dst.dtype() == DType::f32 && dst.is_contiguous() && dst.numel() == static_cast<int64_t>(values.size()), op,
             ": dst ", dst.str(), " must be packed f32 of ", values.size(), " elements");
  if (values.empty()) return;
  const int device = checked_index(dst.device(), op);
  DeviceGuard g(device);
  auto* out = static_cast<unsigned char*>(dst.raw_data());
  const auto* src = reinterpret_cast<const unsigned char*>(values.data());
  const size_t bytes = values.size() * sizeof(float);
  for (size_t at = 0; at < bytes; at += kTableBytesPerLaunch) {
    const int n = static_cast<int>(std::min<size_t>(kTableBytesPerLaunch, bytes - at));
    TableBytes part;
    std::memcpy(part.b, src + at, static_cast<size_t>(n));
    write_table_kernel<<<1, kThreads, 0, stream_of(device)>>>(out + at, part, n);
    CUDA_CHECK_LAUNCH();
  }
}

bool unscale_and_check_finite(const std::vector<Tensor>& grads, double inv_scale) {
  const char* op = "unscale_and_check_finite";
  Table t;
  for (const Tensor& g : grads) {
    if (!g.defined()) continue;
    KILN_CHECK(g.is_contiguous(), op, ": gradient ", g.str(), " must be packed (it is scaled in place)");
    t.add_tensor(op, g);
  }
  if (t.chunks == 0) return true;
  Tensor flag = Tensor::zeros({}, DType::i32, Device::cuda(t.device));
  t.launch(UnscaleBody{static_cast<float>(inv_scale), static_cast<int32_t*>(flag.raw_data()), nullptr});
  return read_i32(flag) == 0;
}

namespace {
__global__ void loss_scale_update_kernel(double* state, float* scale32, int32_t* found_inf, LossScaleRule rule) {
  apply_loss_scale_rule(state, *found_inf != 0, rule);
  *scale32 = static_cast<float>(state[kScale]);
  *found_inf = 0;
}
}  // namespace

void loss_scale_unscale(const std::vector<Tensor>& grads, const Tensor& state, const Tensor& found_inf) {
  const char* op = "loss_scale_unscale";
  check_loss_scale_state(op, state, found_inf);
  Table t;
  for (const Tensor& g : grads) {
    if (!g.defined()) continue;
    KILN_CHECK(g.is_contiguous(), op, ": gradient ", g.str(), " must be packed (it is scaled in place)");
    t.add_tensor(op, g);
  }
  if (t.chunks == 0) return;
  KILN_CHECK(state.device() == Device::cuda(t.device), op, ": the scaler's state ", state.str(), " must be on ",
             Device::cuda(t.device).str(), " with the gradients");
  t.launch(UnscaleBody{0.f, static_cast<int32_t*>(found_inf.raw_data()), static_cast<const double*>(state.raw_data())});
}

void loss_scale_update(const Tensor& state, const Tensor& scale32, const Tensor& found_inf, const LossScaleRule& rule) {
  const char* op = "loss_scale_update";
  check_loss_scale_state(op, state, found_inf);
  KILN_CHECK(scale32.dtype() == DType::f32 && scale32.numel() == 1, op, ": scale32 must be f32 [], got ", scale32.str());
  int device = same_device(op, {&state, &scale32});
  DeviceGuard g(device);
  loss_scale_update_kernel<<<1, 1, 0, stream_of(device)>>>(static_cast<double*>(state.raw_data()),
                                                          static_cast<float*>(scale32.raw_data()),
                                                          static_cast<int32_t*>(found_inf.raw_data()), rule);
  CUDA_CHECK_LAUNCH();
}

void clip_grad_norm_on_device(const std::vector<Tensor>& grads, double max_norm) {
  const char* op = "clip_grad_norm_on_device";
  KILN_CHECK(max_norm > 0, op, ": max_norm must be > 0, got ", max_norm);
  Table t;
  for (const Tensor& g : grads) {
    if (!g.defined()) continue;
    KILN_CHECK(g.is_contiguous(), op, ": gradient ", g.str(), " must be packed (it is scaled in place)");
    t.add_tensor(op, g);
  }
  if (t.chunks == 0) return;
  DeviceGuard guard(t.device);
  const Device d = Device::cuda(t.device);
  Tensor partial = Tensor::empty({t.chunks}, DType::f32, d);
  Tensor sumsq = Tensor::empty({}, DType::f64, d);
  Tensor coef = Tensor::empty({}, DType::f32, d);
  Tensor apply = Tensor::empty({}, DType::i32, d);
  const Entry* table = t.upload_table();
  cudaStream_t stream = stream_of(t.device);
  // the norm exactly as sum_of_squares() takes it
  sumsq_kernel<<<t.grid(), kThreads, 0, stream>>>(table, static_cast<int>(t.entries.size()), t.chunks,
                                                  static_cast<float*>(partial.raw_data()));
  CUDA_CHECK_LAUNCH();
  reduce_arb<1, SumCombine>(t.device, 1, t.chunks, 1, LoadVector{static_cast<const float*>(partial.raw_data())},
                            StoreF64{static_cast<double*>(sumsq.raw_data())});
  clip_coef_kernel<<<1, 1, 0, stream>>>(static_cast<const double*>(sumsq.raw_data()), max_norm,
                                        static_cast<float*>(coef.raw_data()), static_cast<int32_t*>(apply.raw_data()));
  CUDA_CHECK_LAUNCH();
  t.launch(ScaleByBody{static_cast<const float*>(coef.raw_data()), static_cast<const int32_t*>(apply.raw_data())});
}

double sum_of_squares(const std::vector<Tensor>& xs) {
  const char* op = "sum_of_squares";
  Table t;
  for (const Tensor& x : xs)
    if (x.defined()) t.add_tensor(op, x);
  if (t.chunks == 0) return 0.0;
  DeviceGuard guard(t.device);
  Tensor partial = Tensor::empty({t.chunks}, DType::f32, Device::cuda(t.device));
  Tensor out = Tensor::empty({}, DType::f64, Device::cuda(t.device));
  const Entry* table = t.upload_table();
  sumsq_kernel<<<t.grid(), kThreads, 0, stream_of(t.device)>>>(table, static_cast<int>(t.entries.size()), t.chunks,
                                                                 static_cast<float*>(partial.raw_data()));
  CUDA_CHECK_LAUNCH();
  reduce_arb<1, SumCombine>(t.device, 1, t.chunks, 1, LoadVector{static_cast<const float*>(partial.raw_data())},
                            StoreF64{static_cast<double*>(out.raw_data())});
  return out.item();
}

}  // namespace kiln::cuda
