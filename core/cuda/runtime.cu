// Per-device CUDA contexts, error reporting and the backend's settings. See runtime.h.
// Tests: tests/gpu/runtime_test.cpp.
#include "core/cuda/runtime.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "core/cuda/cuda_ops.h"
#include "core/host_wait.h"

namespace kiln {

int cuda_device_count() {
  // NOTE: no driver or no GPU is a normal state (CPU machines run CUDA builds too): report 0 and
  // clear the error, never print or throw. The count is fixed for the life of the process.
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return count;
}

bool cuda_compiled() { return true; }

std::pair<size_t, size_t> cuda_mem_get_info(int device) {
  cuda::context(device);
  cuda::DeviceGuard g(device);
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return {free_b, total_b};
}

namespace cuda {

// --- errors ------------------------------------------------------------------------------------------
namespace detail {
namespace {
[[noreturn]] void raise(bool oom, const std::string& msg, const char* file, int line) {
  if (!oom) ::kiln::detail::throw_error(file, line, msg);
  try {
    ::kiln::detail::throw_error(file, line, msg);  // formats the location like every other error
  } catch (const Error& e) {
    throw OutOfMemoryError(e.what());
  }
}
}  // namespace

void throw_cuda(cudaError_t e, const char* call, const char* file, int line) {
  raise(e == cudaErrorMemoryAllocation,
        std::string(call) + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")", file, line);
}

void throw_cudnn(cudnnStatus_t s, const char* call, const char* file, int line) {
  char detail[512] = {0};
  cudnnGetLastErrorString(detail, sizeof(detail));
  std::string msg = std::string(call) + " failed: " + cudnnGetErrorString(s);
  if (detail[0]) msg += std::string(" (") + detail + ")";
  raise(s == CUDNN_STATUS_ALLOC_FAILED || s == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED, msg, file, line);
}

void throw_cublas(cublasStatus_t s, const char* call, const char* file, int line) {
  raise(s == CUBLAS_STATUS_ALLOC_FAILED,
        std::string(call) + " failed: " + cublasLtGetStatusName(s) + " (" + cublasLtGetStatusString(s) + ")", file,
        line);
}

void throw_nccl(ncclResult_t r, const char* call, const char* file, int line) {
  std::string msg = std::string(call) + " failed: " + ncclGetErrorString(r);
  const char* last = ncclGetLastError(nullptr);
  if (last && last[0]) msg += std::string(" (") + last + ")";
  raise(false, msg, file, line);
}
}  // namespace detail

// --- device guard ------------------------------------------------------------------------------------
DeviceGuard::DeviceGuard(int device) : cur_(device) {
  CUDA_CHECK(cudaGetDevice(&prev_));
  if (prev_ != device) CUDA_CHECK(cudaSetDevice(device));
}

DeviceGuard::~DeviceGuard() {
  if (prev_ >= 0 && prev_ != cur_) cudaSetDevice(prev_);  // destructors do not throw
}

// --- contexts ----------------------------------------------------------------------------------------
namespace {

// Argument tables go through a ring of pinned staging buffers, each with an event recorded after
// the copy that reads it: a new upload takes the next buffer and waits only if that buffer's copy,
// kUploadRing uploads ago, has not run yet (the host is that far ahead of the device). The device
// side is one buffer: each copy into it is stream-ordered after the kernels that read the previous
// table. A table larger than the buffer replaces it; the old one is kept (never freed) because
// queued kernels may still read it, so growing needs no sync either (it only doubles, rarely).
constexpr size_t kUploadRing = 16;

struct Staging {
  void* host = nullptr;  // pinned
  size_t capacity = 0;
  cudaEvent_t done = nullptr;  // recorded after the last copy from `host`
  bool pending = false;
};

struct UploadArea {
  Staging ring[kUploadRing];
  size_t next = 0;
  void* dev = nullptr;
  size_t dev_capacity = 0;
  std::vector<void*> retired;  // outgrown device buffers (see above)
};

struct Slot {
  std::once_flag once, cudnn_once, lt_once;
  std::unique_ptr<DeviceContext> ctx;
  cudnnHandle_t cudnn = nullptr;
  LtHandle lt;
  std::mutex upload_mu;
  UploadArea upload;
};

constexpr size_t kLtWorkspaceBytes = size_t(32) << 20;  // cuBLASLt's recommendation for Hopper

std::vector<Slot>& slots() {
  // NOTE: never destroyed: handles and streams go with the process rather than racing the driver's
  // own teardown at exit.
  static auto* s = new std::vector<Slot>(static_cast<size_t>(cuda_device_count()));
  return *s;
}

std::unique_ptr<DeviceContext> create_context(int device) {
  DeviceGuard g(device);
  auto c = std::make_unique<DeviceContext>();
  c->device = device;
  CUDA_CHECK(cudaDeviceGetAttribute(&c->sm_count, cudaDevAttrMultiProcessorCount, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&c->cc_major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&c->cc_minor, cudaDevAttrComputeCapabilityMinor, device));
  CUDA_CHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
  return c;
}

}  // namespace

int checked_index(Device d, const char* what) {
  KILN_CHECK(d.is_cuda(), what, ": expected a CUDA tensor, got one on ", d.str());
  int n = cuda_device_count();
  KILN_CHECK(d.index >= 0 && d.index < n, what, ": device ", d.str(), " does not exist (", n,
             " CUDA device(s) visible)");
  return d.index;
}

DeviceContext& context(int device) {
  checked_index(Device::cuda(device), "CUDA context");
  Slot& s = slots()[static_cast<size_t>(device)];
  // NOTE: call_once re-runs the initialiser if it throws, so a failed start can be retried.
  std::call_once(s.once, [&] { s.ctx = create_context(device); });
  return *s.ctx;
}

cudnnHandle_t cudnn_handle(int device) {
  DeviceContext& c = context(device);
  Slot& s = slots()[static_cast<size_t>(device)];
  std::call_once(s.cudnn_once, [&] {
    DeviceGuard g(device);
    cudnnHandle_t h = nullptr;
    CUDNN_CHECK(cudnnCreate(&h));
    CUDNN_CHECK(cudnnSetStream(h, c.stream));
    s.cudnn = h;
  });
  return s.cudnn;
}

const LtHandle& cublaslt(int device) {
  context(device);
  Slot& s = slots()[static_cast<size_t>(device)];
  std::call_once(s.lt_once, [&] {
    DeviceGuard g(device);
    LtHandle lt;
    CUBLAS_CHECK(cublasLtCreate(&lt.handle));
    CUDA_CHECK(cudaMalloc(&lt.workspace, kLtWorkspaceBytes));
    lt.workspace_bytes = kLtWorkspaceBytes;
    s.lt = lt;
  });
  return s.lt;
}

const void* upload(int device, const void* host, size_t bytes) {
  DeviceContext& c = context(device);
  Slot& s = slots()[static_cast<size_t>(device)];
  std::lock_guard<std::mutex> lock(s.upload_mu);
  UploadArea& u = s.upload;
  DeviceGuard g(device);
  Staging& st = u.ring[u.next];
  u.next = (u.next + 1) % kUploadRing;
  if (st.pending) {  // this staging buffer may still be read by its copy of kUploadRing uploads ago
    cudaError_t q = cudaEventQuery(st.done);
    if (q == cudaErrorNotReady) {
      HostWaitTimer wait;
      CUDA_CHECK(cudaEventSynchronize(st.done));
    } else {
      CUDA_CHECK(q);
    }
    st.pending = false;
  }
  if (bytes > st.capacity || !st.host) {
    if (st.host) CUDA_CHECK(cudaFreeHost(st.host));  // not pending (above): nothing reads it
    st.host = nullptr;
    st.capacity = 0;
    size_t cap = std::max<size_t>(bytes, 64 << 10);
    CUDA_CHECK(cudaHostAlloc(&st.host, cap, cudaHostAllocDefault));
    st.capacity = cap;
    if (!st.done) CUDA_CHECK(cudaEventCreateWithFlags(&st.done, cudaEventDisableTiming));
  }
  if (bytes > u.dev_capacity) {
    size_t cap = std::max<size_t>(bytes, std::max<size_t>(2 * u.dev_capacity, 64 << 10));
    void* fresh = nullptr;
    CUDA_CHECK(cudaMalloc(&fresh, cap));
    if (u.dev) u.retired.push_back(u.dev);
    u.dev = fresh;
    u.dev_capacity = cap;
  }
  std::memcpy(st.host, host, bytes);
  CUDA_CHECK(cudaMemcpyAsync(u.dev, st.host, bytes, cudaMemcpyHostToDevice, c.stream));
  CUDA_CHECK(cudaEventRecord(st.done, c.stream));
  st.pending = true;
  return u.dev;
}

int grid_for(int device, int64_t n, int threads) {
  int64_t need = (n + threads - 1) / threads;
  int64_t cap = static_cast<int64_t>(context(device).sm_count) * (2048 / threads) * 2;
  return static_cast<int>(std::max<int64_t>(1, std::min(need, cap)));
}

// --- cuda_ops.h: runtime and settings -------------------------------------------------------------
void synchronize(int device) {
  DeviceContext& c = context(device);
  DeviceGuard g(device);
  HostWaitTimer wait;
  CUDA_CHECK(cudaStreamSynchronize(c.stream));
}

std::string device_name(int device) {
  checked_index(Device::cuda(device), "device_name");
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return prop.name;
}

std::string versions() {
  auto dotted = [](int v, int major_div) {
    return std::to_string(v / major_div) + "." + std::to_string(v / (major_div / 100) % 100) +
           (major_div > 1000 ? "." + std::to_string(v % 100) : "");
  };
  int rt = 0, drv = 0, nccl = 0;
  cudaRuntimeGetVersion(&rt);
  if (cudaDriverGetVersion(&drv) != cudaSuccess) {
    cudaGetLastError();
    drv = 0;
  }
  ncclGetVersion(&nccl);
  std::string s = "CUDA runtime " + dotted(rt, 1000);
  s += drv ? ", driver " + dotted(drv, 1000) : ", no CUDA driver";
  s += ", cuDNN " + dotted(static_cast<int>(cudnnGetVersion()), 10000);
  s += ", cuBLASLt " + dotted(static_cast<int>(cublasLtGetVersion()), 10000);
  s += ", NCCL " + dotted(nccl, 10000);
  return s;
}

namespace {
std::atomic<bool> g_benchmark{false};
std::atomic<bool> g_conv_tf32{true};
std::atomic<bool> g_matmul_tf32{false};
std::atomic<size_t> g_conv_ws_limit{size_t(1) << 30};
}  // namespace

void set_cudnn_benchmark(bool on) { g_benchmark = on; }
bool cudnn_benchmark() { return g_benchmark; }
void set_conv_allow_tf32(bool on) { g_conv_tf32 = on; }
bool conv_allow_tf32() { return g_conv_tf32; }
void set_matmul_allow_tf32(bool on) { g_matmul_tf32 = on; }
bool matmul_allow_tf32() { return g_matmul_tf32; }
void set_conv_workspace_limit(size_t bytes) { g_conv_ws_limit = bytes; }
size_t conv_workspace_limit() { return g_conv_ws_limit; }

}  // namespace cuda
}  // namespace kiln
