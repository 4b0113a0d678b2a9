// CUDA runtime plumbing for the backend's .cu files (and tests that need raw CUDA types):
//   - CUDA_CHECK / CUDNN_CHECK / CUBLAS_CHECK / NCCL_CHECK: throw kiln::Error naming the call, the
//     status (name and text) and file:line; library code never aborts on a CUDA error.
//   - DeviceGuard: makes a device current for a scope (one thread may drive several GPUs).
//   - DeviceContext: per GPU, created lazily on first use: the compute stream every kernel, copy and
//     collective of that device is queued on, the cuDNN and cuBLASLt handles bound to it, the
//     cuBLASLt workspace and a small upload area for kernel argument tables.
// NOTE: there is a single stream per device on purpose: the caching allocator is not stream-aware,
// so a block freed by one stream could be handed to another while still in use. With one stream the
// stream order alone keeps reuse safe (see docs/cuda_backend.md).
// The plain C++ API (no CUDA types) is core/cuda/cuda_ops.h. Tests: tests/gpu/runtime_test.cpp.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

#include <cstddef>
#include <map>
#include <mutex>
#include <string>

#include "core/check.h"
#include "core/device.h"

namespace kiln::cuda {

namespace detail {
[[noreturn]] void throw_cuda(cudaError_t e, const char* call, const char* file, int line);
[[noreturn]] void throw_cudnn(cudnnStatus_t s, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas(cublasStatus_t s, const char* call, const char* file, int line);
[[noreturn]] void throw_nccl(ncclResult_t r, const char* call, const char* file, int line);
}  // namespace detail

}  // namespace kiln::cuda

#define CUDA_CHECK(call)                                                                   \
  do {                                                                                     \
    cudaError_t kiln_e_ = (call);                                                          \
    if (kiln_e_ != cudaSuccess) ::kiln::cuda::detail::throw_cuda(kiln_e_, #call, __FILE__, __LINE__); \
  } while (0)
#define CUDNN_CHECK(call)                                                                  \
  do {                                                                                     \
    cudnnStatus_t kiln_s_ = (call);                                                        \
    if (kiln_s_ != CUDNN_STATUS_SUCCESS) ::kiln::cuda::detail::throw_cudnn(kiln_s_, #call, __FILE__, __LINE__); \
  } while (0)
#define CUBLAS_CHECK(call)                                                                 \
  do {                                                                                     \
    cublasStatus_t kiln_s_ = (call);                                                       \
    if (kiln_s_ != CUBLAS_STATUS_SUCCESS) ::kiln::cuda::detail::throw_cublas(kiln_s_, #call, __FILE__, __LINE__); \
  } while (0)
#define NCCL_CHECK(call)                                                                   \
  do {                                                                                     \
    ncclResult_t kiln_r_ = (call);                                                         \
    if (kiln_r_ != ncclSuccess) ::kiln::cuda::detail::throw_nccl(kiln_r_, #call, __FILE__, __LINE__); \
  } while (0)
// After a kernel launch: reports bad launch configurations at the launch site.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

namespace kiln::cuda {

// Makes `device` current for the scope and restores the previous device after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = -1;
  int cur_ = -1;
};

struct DeviceContext {
  int device = 0;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  cudaStream_t stream = nullptr;  // the compute stream: kernels, copies, cuDNN, cuBLASLt, NCCL
};

// The context of `device`, created on first use (thread-safe). Throws if the device does not exist.
DeviceContext& context(int device);
inline cudaStream_t stream_of(int device) { return context(device).stream; }

// Library handles, created on first use and bound to the device's stream. cuDNN and cuBLASLt
// handles are not thread-safe: each device is driven by one thread at a time (one per replica).
cudnnHandle_t cudnn_handle(int device);
struct LtHandle {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;  // raw cudaMalloc, lives as long as the process (not in the allocator's counters)
  size_t workspace_bytes = 0;
};
const LtHandle& cublaslt(int device);
// Checks that `d` is a CUDA device that exists and returns its index.
int checked_index(Device d, const char* what);

// Copies `bytes` of host data to a per-device scratch area and returns its device address. The data
// stays valid for kernels queued on the device's stream before the next upload() call of that
// device (the next upload is stream-ordered after them). Used for multi-tensor argument tables.
const void* upload(int device, const void* host, size_t bytes);

// One T per device (plan caches), created on first use. Never destroyed: the cuDNN/cuBLASLt
// descriptors inside must not be torn down after the libraries during static destruction.
template <typename T>
T& per_device(int device) {
  static std::mutex mu;
  static auto* all = new std::map<int, T>;
  std::lock_guard<std::mutex> lock(mu);
  return (*all)[device];
}

// Pinned host blocks (core/cuda/pinned_cuda.cu): whether p lies in one, and recording that a copy
// reading it was just queued on `device`'s stream (wait_host_copies() then waits for it). With
// pinned_alloc, pinned_free and wait_host_copies, the kernels of core/pinned.h's slots.
bool is_pinned_ptr(const void* p);
void record_pinned_read(const void* p, int device);
void* pinned_alloc(size_t bytes);  // nullptr when out of page-locked memory
void pinned_free(void* p);
void wait_host_copies(const void* p);

// Fills core/graph_capture.h's slots (core/cuda/graph_cuda.cu): stream capture into CUDA graphs, with a
// private pool of the caching allocator per capture; called by register_kernels().
void register_graph_kernels();

// Grid size for a grid-stride loop over n items with `threads` per block: enough blocks to fill
// the device a few times over, never more than the items need.
int grid_for(int device, int64_t n, int threads);

}  // namespace kiln::cuda
