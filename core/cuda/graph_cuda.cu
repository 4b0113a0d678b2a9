// CUDA graphs behind core/graph_capture.h: a capture of a device's compute stream in thread-local
// mode, its allocations from a private pool of the device's caching allocator (core/allocator.h),
// instantiated once and replayed with cudaGraphLaunch on the same stream. docs/cuda_backend.md,
// "CUDA graphs". Tests: tests/gpu/cuda_graph_test.cpp.
#include <memory>
#include <string>

#include "core/allocator.h"
#include "core/graph_capture.h"
#include "core/cuda/runtime.h"

namespace kiln {
CachingAllocator& cuda_allocator(int index);  // core/cuda/allocator_cuda.cu
}

namespace kiln::cuda {

namespace {

// Per device: the pool of the capture under way (0: none). One thread drives a device (runtime.h).
int& capturing_pool(int device) { return per_device<int>(device); }

class CudaGraph final : public CapturedWork {
 public:
  CudaGraph(int device, cudaGraph_t graph, cudaGraphExec_t exec, int pool)
      : device_(device), graph_(graph), exec_(exec), pool_(pool) {}
  ~CudaGraph() override {
    DeviceGuard g(device_);
    // A replay may still be queued: let it finish before the graph and its memory go.
    cudaStreamSynchronize(stream_of(device_));
    cudaGraphExecDestroy(exec_);
    cudaGraphDestroy(graph_);
    cudaGetLastError();  // a destructor reports nothing; clear what these may have set
    cuda_allocator(device_).release_pool(pool_);
  }
  void replay() override {
    DeviceGuard g(device_);
    CUDA_CHECK(cudaGraphLaunch(exec_, stream_of(device_)));
  }

 private:
  int device_;
  cudaGraph_t graph_;
  cudaGraphExec_t exec_;
  int pool_;
};

void begin(int device) {
  DeviceGuard g(device);
  cudaStream_t s = stream_of(device);
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(s, &st));
  KILN_CHECK(st == cudaStreamCaptureStatusNone && capturing_pool(device) == 0,
             "begin_capture: cuda:", device, " is already capturing");
  const int pool = cuda_allocator(device).begin_pool();
  const cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  if (e != cudaSuccess) {
    cuda_allocator(device).release_pool(pool);
    CUDA_CHECK(e);
  }
  capturing_pool(device) = pool;
}

std::shared_ptr<CapturedWork> end(int device) {
  DeviceGuard g(device);
  const int pool = capturing_pool(device);
  KILN_CHECK(pool != 0, "end_capture: cuda:", device, " is not capturing");
  capturing_pool(device) = 0;
  CachingAllocator& alloc = cuda_allocator(device);
  alloc.end_pool();
  cudaGraph_t graph = nullptr;
  cudaError_t e = cudaStreamEndCapture(stream_of(device), &graph);
  if (e != cudaSuccess || graph == nullptr) {
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    alloc.release_pool(pool);
    KILN_CHECK(false, "end_capture on cuda:", device, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e),
               "): the captured work made a call a capture does not allow");
  }
  cudaGraphExec_t exec = nullptr;
  e = cudaGraphInstantiate(&exec, graph, 0);
  if (e != cudaSuccess) {
    cudaGraphDestroy(graph);
    cudaGetLastError();
    alloc.release_pool(pool);
    KILN_CHECK(false, "end_capture on cuda:", device, ": cudaGraphInstantiate failed: ", cudaGetErrorName(e), " (",
               cudaGetErrorString(e), ")");
  }
  return std::make_shared<CudaGraph>(device, graph, exec, pool);
}

void abandon(int device) {
  DeviceGuard g(device);
  const int pool = capturing_pool(device);
  capturing_pool(device) = 0;
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream_of(device), &st) == cudaSuccess && st != cudaStreamCaptureStatusNone) {
    cudaGraph_t graph = nullptr;
    cudaStreamEndCapture(stream_of(device), &graph);
    if (graph) cudaGraphDestroy(graph);
  }
  cudaGetLastError();  // capture errors are not sticky: clear them so the eager step starts clean
  if (pool) cuda_allocator(device).release_pool(pool);
}

}  // namespace

void register_graph_kernels() {
  constexpr DeviceType gpu = DeviceType::CUDA;
  begin_capture_kernel.set(gpu, begin);
  end_capture_kernel.set(gpu, end);
  abandon_capture_kernel.set(gpu, abandon);
}

}  // namespace kiln::cuda
