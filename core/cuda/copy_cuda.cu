// Copies that touch a GPU (host <-> device, device <-> device) and fill on a GPU, for any strides and
// any dtype pair (f32, f16, bf16, i32, i64, u8, f64). Conversions go through double on the device,
// exactly as the CPU's copy does, so a value converts the same on either side.
//   H2D: packed on the host if strided; a pinned source is copied asynchronously (see pinned.h),
//        a pageable one is waited for; dtype conversion and scattering into a strided destination
//        run on the device.
//   D2H: gathered/converted on the device, then copied and waited for.
//   D2D on one device: cudaMemcpyAsync when both are packed and of one dtype, else a kernel.
//   D2D across devices: a peer copy on the destination's stream, waited for (rare: NCCL moves the
//        training traffic).
// Also cuda::increment (a device-side counter += n). Tests: tests/gpu/copy_test.cpp.
#include <cstring>

#include "core/cuda/cuda_ops.h"
#include "core/host_wait.h"
#include "core/cuda/kernel_util.cuh"
#include "core/cuda/runtime.h"

namespace kiln {
namespace cuda {
namespace {

template <typename T> __device__ __forceinline__ double to_double(T v) { return static_cast<double>(v); }
template <> __device__ __forceinline__ double to_double<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ double to_double<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <typename T> __device__ __forceinline__ T from_double(double v) { return static_cast<T>(v); }
template <> __device__ __forceinline__ __half from_double<__half>(double v) {
  return __float2half_rn(static_cast<float>(v));
}
template <> __device__ __forceinline__ __nv_bfloat16 from_double<__nv_bfloat16>(double v) {
  return __float2bfloat16_rn(static_cast<float>(v));
}

// f(TypeTag<T>{}) for every dtype.
template <typename F>
void dispatch_all(DType t, F&& f) {
  switch (t) {
    case DType::f32: f(TypeTag<float>{}); return;
    case DType::f16: f(TypeTag<__half>{}); return;
    case DType::bf16: f(TypeTag<__nv_bfloat16>{}); return;
    case DType::i32: f(TypeTag<int32_t>{}); return;
    case DType::i64: f(TypeTag<int64_t>{}); return;
    case DType::u8: f(TypeTag<uint8_t>{}); return;
    case DType::f64: f(TypeTag<double>{}); return;
  }
  KILN_FAIL("copy: unknown dtype");
}

// Same-dtype copies move bits (an unsigned type of the element's size), never values.
template <typename F>
void dispatch_bits(size_t bytes, F&& f) {
  switch (bytes) {
    case 1: f(TypeTag<uint8_t>{}); return;
    case 2: f(TypeTag<uint16_t>{}); return;
    case 4: f(TypeTag<uint32_t>{}); return;
    case 8: f(TypeTag<uint64_t>{}); return;
  }
  KILN_FAIL("copy: unsupported element size ", bytes);
}

template <typename D, typename S, bool kFlat>
__global__ void convert_kernel(D* dst, const S* src, OffsetCalc<2> oc, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t di = i, si = i;
    if constexpr (!kFlat) {
      int64_t off[2];
      oc.get(i, off);
      di = off[0];
      si = off[1];
    }
    dst[di] = from_double<D>(to_double(src[si]));
  }
}

template <typename T, typename Index>
__global__ void strided_copy_kernel(T* dst, const T* src, OffsetCalc<2> oc, Index n) {
  for (Index i = blockIdx.x * Index(blockDim.x) + threadIdx.x; i < n; i += Index(gridDim.x) * blockDim.x) {
    Index off[2];
    oc.get(i, off);
    dst[off[0]] = src[off[1]];
  }
}

template <typename T, typename Index>
__global__ void fill_kernel(T* dst, T value, OffsetCalc<1> oc, Index n, bool flat) {
  for (Index i = blockIdx.x * Index(blockDim.x) + threadIdx.x; i < n; i += Index(gridDim.x) * blockDim.x) {
    if (flat) {
      dst[i] = value;
    } else {
      Index off[1];
      oc.get(i, off);
      dst[off[0]] = value;
    }
  }
}

__global__ void increment_kernel(int64_t* counter, int64_t by) { *counter += by; }

// dst <- src, both on `device`, same shape.
void copy_on_device(int device, const Tensor& dst, const Tensor& src) {
  int64_t n = dst.numel();
  if (n == 0) return;
  DeviceGuard g(device);
  cudaStream_t s = stream_of(device);
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous()) {
    CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), dst.nbytes(), cudaMemcpyDeviceToDevice, s));
    return;
  }
  auto oc = make_offset_calc<2>(dst.shape(), {dst.strides(), src.strides()});
  constexpr int kThreads = 256;
  int grid = grid_for(device, n, kThreads);
  if (dst.dtype() == src.dtype()) {
    dispatch_bits(dtype_size(dst.dtype()), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* d = static_cast<T*>(dst.raw_data());
      const T* p = static_cast<const T*>(src.raw_data());
      if (fits_u32(oc, n)) strided_copy_kernel<T, uint32_t><<<grid, kThreads, 0, s>>>(d, p, oc, static_cast<uint32_t>(n));
      else strided_copy_kernel<T, int64_t><<<grid, kThreads, 0, s>>>(d, p, oc, n);
    });
    CUDA_CHECK_LAUNCH();
    return;
  }
  bool flat = dst.is_contiguous() && src.is_contiguous();
  dispatch_all(dst.dtype(), [&](auto dtag) {
    using D = typename decltype(dtag)::type;
    dispatch_all(src.dtype(), [&](auto stag) {
      using S = typename decltype(stag)::type;
      D* d = static_cast<D*>(dst.raw_data());
      const S* p = static_cast<const S*>(src.raw_data());
      if (flat) convert_kernel<D, S, true><<<grid, kThreads, 0, s>>>(d, p, oc, n);
      else convert_kernel<D, S, false><<<grid, kThreads, 0, s>>>(d, p, oc, n);
    });
  });
  CUDA_CHECK_LAUNCH();
}

// A packed copy of a CPU tensor (same dtype), or the tensor itself when already packed.
Tensor packed_host(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor out = Tensor::empty(t.shape(), t.dtype(), Device::cpu());
  copy_tensor(out, t);
  return out;
}

void copy_host_to_device(const Tensor& dst, const Tensor& src0) {
  int device = checked_index(dst.device(), "copy to device");
  Tensor src = packed_host(src0);
  Tensor target = (dst.is_contiguous() && dst.dtype() == src.dtype())
                      ? dst
                      : Tensor::empty(src.shape(), src.dtype(), dst.device());
  DeviceGuard g(device);
  cudaStream_t s = stream_of(device);
  if (is_pinned_ptr(src.raw_data())) {
    // Returns at once; the loader must wait_host_copies() before refilling the block.
    CUDA_CHECK(cudaMemcpyAsync(target.raw_data(), src.raw_data(), src.nbytes(), cudaMemcpyHostToDevice, s));
    record_pinned_read(src.raw_data(), device);
  } else {
    // NOTE: CUDA may still read pageable memory after cudaMemcpyAsync returns, and `src` may be a
    // temporary: wait, as PyTorch does for blocking copies. Hot paths use pinned buffers. The copy
    // itself may wait too (a pageable source is staged), so it is timed with the wait.
    HostWaitTimer wait;
    CUDA_CHECK(cudaMemcpyAsync(target.raw_data(), src.raw_data(), src.nbytes(), cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
  }
  if (!target.same(dst)) copy_on_device(device, dst, target);
}

void copy_device_to_host(const Tensor& dst, const Tensor& src0) {
  int device = checked_index(src0.device(), "copy to host");
  Tensor src = src0;
  if (!src.is_contiguous() || src.dtype() != dst.dtype()) {
    src = Tensor::empty(src0.shape(), dst.dtype(), src0.device());
    copy_on_device(device, src, src0);
  }
  Tensor target = dst.is_contiguous() ? dst : Tensor::empty(dst.shape(), dst.dtype(), Device::cpu());
  DeviceGuard g(device);
  cudaStream_t s = stream_of(device);
  {
    // A copy to host memory returns only once it has completed, i.e. after everything queued
    // before it: the wait is inside cudaMemcpyAsync, so the timer covers the call itself.
    HostWaitTimer wait;
    CUDA_CHECK(cudaMemcpyAsync(target.raw_data(), src.raw_data(), src.nbytes(), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
  }
  if (!target.same(dst)) copy_tensor(dst, target);
}

void copy_across_devices(const Tensor& dst, const Tensor& src0) {
  int sd = checked_index(src0.device(), "copy between devices");
  int dd = checked_index(dst.device(), "copy between devices");
  Tensor src = src0;
  if (!src.is_contiguous() || src.dtype() != dst.dtype()) {
    src = Tensor::empty(src0.shape(), dst.dtype(), src0.device());
    copy_on_device(sd, src, src0);
  }
  Tensor target = dst.is_contiguous() ? dst : Tensor::empty(dst.shape(), dst.dtype(), dst.device());
  {
    DeviceGuard g(sd);
    HostWaitTimer wait;
    CUDA_CHECK(cudaStreamSynchronize(stream_of(sd)));  // src is complete before the peer reads it
  }
  DeviceGuard g(dd);
  cudaStream_t s = stream_of(dd);
  CUDA_CHECK(cudaMemcpyPeerAsync(target.raw_data(), dd, src.raw_data(), sd, src.nbytes(), s));
  if (!target.same(dst)) copy_on_device(dd, dst, target);
  // Waited for, so the source may be freed and reused on its own stream right away.
  HostWaitTimer wait;
  CUDA_CHECK(cudaStreamSynchronize(s));
}

}  // namespace

// --- kernel_util.cuh host helpers -------------------------------------------------------------------
int same_device(const char* op, std::initializer_list<const Tensor*> ts) {
  int device = -1;
  const Tensor* first = nullptr;
  for (const Tensor* t : ts) {
    if (!t || !t->defined()) continue;
    int d = checked_index(t->device(), op);
    KILN_CHECK(device < 0 || d == device, op, ": tensors on different devices: ", first->str(), " and ", t->str());
    device = d;
    first = t;
  }
  KILN_CHECK(device >= 0, op, ": no tensor given");
  return device;
}

Tensor packed(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor out = Tensor::empty(t.shape(), t.dtype(), t.device());
  copy_on_device(checked_index(t.device(), "packed"), out, t);
  return out;
}

Tensor packed_f32(const Tensor& t) {
  if (t.dtype() == DType::f32 && t.is_contiguous()) return t;
  Tensor out = Tensor::empty(t.shape(), DType::f32, t.device());
  copy_on_device(checked_index(t.device(), "packed_f32"), out, t);
  return out;
}

int32_t read_i32(const Tensor& t) {
  KILN_CHECK(t.dtype() == DType::i32 && t.numel() == 1, "read_i32: expected one i32 value, got ", t.str());
  int device = checked_index(t.device(), "read_i32");
  DeviceGuard g(device);
  cudaStream_t s = stream_of(device);
  int32_t v = 0;
  HostWaitTimer wait;  // the copy to host memory is where the host waits (see copy_device_to_host)
  CUDA_CHECK(cudaMemcpyAsync(&v, t.raw_data(), sizeof(v), cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  return v;
}

}  // namespace cuda

// --- entry points declared in core/tensor.cpp ---------------------------------------------------------
void copy_tensor_cuda(const Tensor& dst, const Tensor& src) {
  KILN_CHECK(dst.shape() == src.shape(), "copy: shape ", shape_str(src.shape()), " into ", shape_str(dst.shape()));
  if (dst.numel() == 0) return;
  bool dc = dst.device().is_cuda(), sc = src.device().is_cuda();
  if (dc && sc) {
    if (dst.device() == src.device()) cuda::copy_on_device(cuda::checked_index(dst.device(), "copy"), dst, src);
    else cuda::copy_across_devices(dst, src);
  } else if (dc) {
    cuda::copy_host_to_device(dst, src);
  } else if (sc) {
    cuda::copy_device_to_host(dst, src);
  } else {
    copy_tensor(dst, src);
  }
}

void fill_cuda(const Tensor& t, double v) {
  int64_t n = t.numel();
  if (n == 0) return;
  int device = cuda::checked_index(t.device(), "fill_");
  // The element's bits exactly as the CPU's store() writes them.
  uint64_t bits = 0;
  switch (t.dtype()) {
    case DType::f32: { float f = static_cast<float>(v); std::memcpy(&bits, &f, 4); break; }
    case DType::f64: std::memcpy(&bits, &v, 8); break;
    case DType::f16: bits = float_to_f16(static_cast<float>(v)); break;
    case DType::bf16: bits = float_to_bf16(static_cast<float>(v)); break;
    case DType::i32: { int32_t i = static_cast<int32_t>(v); std::memcpy(&bits, &i, 4); break; }
    case DType::i64: { int64_t i = static_cast<int64_t>(v); std::memcpy(&bits, &i, 8); break; }
    case DType::u8: bits = static_cast<uint8_t>(v); break;
  }
  cuda::DeviceGuard g(device);
  cudaStream_t s = cuda::stream_of(device);
  if (bits == 0 && t.is_contiguous()) {
    CUDA_CHECK(cudaMemsetAsync(t.raw_data(), 0, t.nbytes(), s));
    return;
  }
  auto oc = cuda::make_offset_calc<1>(t.shape(), {t.strides()});
  bool flat = cuda::is_flat(oc);
  constexpr int kThreads = 256;
  int grid = cuda::grid_for(device, n, kThreads);
  cuda::dispatch_bits(dtype_size(t.dtype()), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T value;
    std::memcpy(&value, &bits, sizeof(T));  // little-endian: the low bytes hold the element
    T* p = static_cast<T*>(t.raw_data());
    if (cuda::fits_u32(oc, n)) cuda::fill_kernel<T, uint32_t><<<grid, kThreads, 0, s>>>(p, value, oc, uint32_t(n), flat);
    else cuda::fill_kernel<T, int64_t><<<grid, kThreads, 0, s>>>(p, value, oc, n, flat);
  });
  CUDA_CHECK_LAUNCH();
}

void cuda::increment(const Tensor& counter, int64_t by) {
  KILN_CHECK(counter.dtype() == DType::i64 && counter.numel() == 1, "increment: expected one i64 value, got ",
             counter.str());
  int device = checked_index(counter.device(), "increment");
  DeviceGuard g(device);
  increment_kernel<<<1, 1, 0, stream_of(device)>>>(static_cast<int64_t*>(counter.raw_data()), by);
  CUDA_CHECK_LAUNCH();
}

}  // namespace kiln
