// NCCL communicator, see nccl_comm.h. Communicators across processes are created non-blocking
// (ncclConfig_t.blocking = 0) so that joining can time out; any call that answers ncclInProgress is
// then polled to completion under the same timeout. Collectives run on a communication stream of
// their own, which first waits (an event) for what the compute stream has queued so far: a gradient
// bucket's all-reduce then runs beside the rest of backward instead of between its kernels.
// Every wait is bounded: joining and collectives by the timeout (then the communicator is aborted),
// the abort itself by kAbortWait (it runs on a helper thread).
// Tests: tests/gpu/nccl_test.cpp, tests/gpu/data_parallel_test.cpp.
#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <iostream>
#include <memory>
#include <thread>

#include "core/host_wait.h"
#include "core/cuda/nccl_comm.h"
#include "core/cuda/runtime.h"

namespace kiln::cuda {

namespace {
constexpr std::chrono::seconds kAbortWait{10};
}  // namespace

struct NcclComm::Impl {
  ncclComm_t comm = nullptr;
  int rank = 0, size = 1, device = 0;
  std::atomic<bool> aborted{false};
  double op_timeout_s = 300.0;  // for calls that answer ncclInProgress (non-blocking communicators)
  cudaStream_t stream = nullptr;  // the collectives' stream (non-blocking, on `device`)
  cudaEvent_t ready = nullptr;    // recorded on the compute stream before a collective
  cudaEvent_t done = nullptr;     // recorded on `stream` after the latest collective

  void make_stream() {
    DeviceGuard g(device);
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  }
  // The stream a collective is queued on, ordered after everything on the compute stream so far.
  cudaStream_t begin_collective() {
    CUDA_CHECK(cudaEventRecord(ready, stream_of(device)));
    CUDA_CHECK(cudaStreamWaitEvent(stream, ready, 0));
    return stream;
  }
  void end_collective() { CUDA_CHECK(cudaEventRecord(done, stream)); }

  std::string where() const {
    return "NCCL rank " + std::to_string(rank) + " of " + std::to_string(size) + " on cuda:" + std::to_string(device);
  }

  // Aborts once. ncclCommAbort of a communicator whose init is still joining (a missing peer) has
  // been seen to block in NCCL's bootstrap; it runs on a helper thread and is waited for at most
  // kAbortWait: past that it is left running in the background (the communicator is unusable
  // either way) and the caller goes on to report the error instead of hanging.
  void do_abort() {
    if (!comm || aborted.exchange(true)) return;
    auto finished = std::make_shared<std::promise<void>>();
    std::future<void> f = finished->get_future();
    std::thread([c = comm, dev = device, finished] {
      cudaSetDevice(dev);
      ncclCommAbort(c);
      finished->set_value();
    }).detach();
    if (f.wait_for(kAbortWait) != std::future_status::ready)
      std::cerr << where() << ": ncclCommAbort did not return within "
                << std::chrono::duration<double>(kAbortWait).count() << " s; left in the background\n";
  }

  // Polls a non-blocking call to completion; aborts and throws on error or timeout.
  void settle(ncclResult_t r, const char* what) {
    auto start = std::chrono::steady_clock::now();
    while (r == ncclInProgress) {
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > op_timeout_s) {
        do_abort();
        KILN_FAIL(where(), ": ", what, " did not complete within ", op_timeout_s,
                  " s (a peer is missing or stuck); the communicator was aborted");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      ncclResult_t st = ncclCommGetAsyncError(comm, &r);
      if (st != ncclSuccess) r = st;
    }
    if (r != ncclSuccess) {
      std::string msg = std::string(ncclGetErrorString(r));
      const char* last = ncclGetLastError(comm);
      if (last && last[0]) msg += std::string(" (") + last + ")";
      do_abort();
      KILN_FAIL(where(), ": ", what, " failed: ", msg, "; the communicator was aborted");
    }
  }

  void check_usable(const char* what) const {
    KILN_CHECK(comm && !aborted, where(), ": ", what, " on an aborted communicator");
  }
};

namespace {
ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::f64: return ncclFloat64;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::u8: return ncclUint8;
  }
  KILN_FAIL("NCCL: unknown dtype");
}
}  // namespace

NcclComm::NcclComm(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::string NcclComm::unique_id() {
  ncclUniqueId id;
  NCCL_CHECK(ncclGetUniqueId(&id));
  return std::string(id.internal, sizeof(id.internal));
}

NcclComm::NcclComm(const std::string& uid, int nranks, int rank, int device, double timeout_s)
    : impl_(std::make_unique<Impl>()) {
  KILN_CHECK(uid.size() == sizeof(ncclUniqueId::internal), "NCCL: a unique id has ", sizeof(ncclUniqueId::internal),
             " bytes, got ", uid.size());
  KILN_CHECK(nranks >= 1 && rank >= 0 && rank < nranks, "NCCL: rank ", rank, " of ", nranks, " is invalid");
  KILN_CHECK(timeout_s > 0, "NCCL: timeout must be > 0 s");
  context(device);
  impl_->rank = rank;
  impl_->size = nranks;
  impl_->device = device;
  impl_->op_timeout_s = timeout_s;
  ncclUniqueId id;
  std::memcpy(id.internal, uid.data(), sizeof(id.internal));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  DeviceGuard g(device);
  ncclResult_t r = ncclCommInitRankConfig(&impl_->comm, nranks, id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    if (impl_->comm) ncclCommAbort(impl_->comm);
    impl_->comm = nullptr;
    detail::throw_nccl(r, "ncclCommInitRankConfig", __FILE__, __LINE__);
  }
  impl_->settle(ncclInProgress, "joining the communicator");  // polls until every rank has joined
  impl_->make_stream();
}

std::vector<std::unique_ptr<NcclComm>> NcclComm::create_local(const std::vector<int>& devices) {
  KILN_CHECK(!devices.empty(), "NCCL: create_local needs at least one device");
  for (int d : devices) context(d);
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  NCCL_CHECK(ncclCommInitAll(comms.data(), static_cast<int>(devices.size()), devices.data()));
  std::vector<std::unique_ptr<NcclComm>> out;
  for (size_t i = 0; i < devices.size(); ++i) {
    auto impl = std::make_unique<Impl>();
    impl->comm = comms[i];
    impl->rank = static_cast<int>(i);
    impl->size = static_cast<int>(devices.size());
    impl->device = devices[i];
    impl->make_stream();
    out.push_back(std::unique_ptr<NcclComm>(new NcclComm(std::move(impl))));
  }
  return out;
}

NcclComm::~NcclComm() {
  if (!impl_) return;
  DeviceGuard g(impl_->device);
  // No throwing from a destructor; the process keeps going either way.
  if (impl_->comm && !impl_->aborted) ncclCommDestroy(impl_->comm);
  if (impl_->done) cudaEventDestroy(impl_->done);
  if (impl_->ready) cudaEventDestroy(impl_->ready);
  if (impl_->stream) cudaStreamDestroy(impl_->stream);
}

int NcclComm::rank() const { return impl_->rank; }
int NcclComm::size() const { return impl_->size; }
int NcclComm::device() const { return impl_->device; }
bool NcclComm::aborted() const { return impl_->aborted; }

void NcclComm::all_reduce(const Tensor& t, ReduceOp op) {
  impl_->check_usable("all_reduce");
  KILN_CHECK(t.device() == Device::cuda(impl_->device) && t.is_contiguous(), impl_->where(), ": all_reduce needs a packed tensor on cuda:",
             impl_->device, ", got ", t.str());
  KILN_CHECK(op != ReduceOp::avg || is_floating(t.dtype()), impl_->where(), ": avg needs a floating tensor, got ",
             t.str());
  if (t.numel() == 0) return;
  DeviceGuard g(impl_->device);
  cudaStream_t s = impl_->begin_collective();
  ncclResult_t r = ncclAllReduce(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()),
                                 op == ReduceOp::avg ? ncclAvg : op == ReduceOp::min ? ncclMin : ncclSum, impl_->comm, s);
  impl_->settle(r, "all_reduce");
  impl_->end_collective();
}

void NcclComm::broadcast(const Tensor& t, int root) {
  impl_->check_usable("broadcast");
  KILN_CHECK(t.device() == Device::cuda(impl_->device) && t.is_contiguous(), impl_->where(), ": broadcast needs a packed tensor on cuda:",
             impl_->device, ", got ", t.str());
  KILN_CHECK(root >= 0 && root < impl_->size, impl_->where(), ": broadcast root ", root, " out of range");
  if (t.numel() == 0) return;
  DeviceGuard g(impl_->device);
  cudaStream_t s = impl_->begin_collective();
  ncclResult_t r = ncclBroadcast(t.raw_data(), t.raw_data(), t.nbytes(), ncclUint8, root, impl_->comm, s);
  impl_->settle(r, "broadcast");
  impl_->end_collective();
}

void NcclComm::synchronize(double timeout_s) {
  impl_->check_usable("synchronize");
  DeviceGuard g(impl_->device);
  cudaStream_t s = impl_->stream;
  HostWaitTimer wait;
  auto start = std::chrono::steady_clock::now();
  while (true) {
    cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess) {
      // Done; later work on the compute stream is ordered after the collectives as well.
      CUDA_CHECK(cudaStreamWaitEvent(stream_of(impl_->device), impl_->done, 0));
      return;
    }
    if (e != cudaErrorNotReady) CUDA_CHECK(e);
    KILN_CHECK(!impl_->aborted, impl_->where(), ": the communicator was aborted (another replica failed) while "
               "collectives were pending");
    ncclResult_t st = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError(impl_->comm, &st));
    if (st != ncclSuccess && st != ncclInProgress) impl_->settle(st, "a collective");
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > timeout_s) {
      impl_->do_abort();
      KILN_FAIL(impl_->where(), ": collectives did not finish within ", timeout_s,
                " s (a peer is missing or stuck); the communicator was aborted");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void NcclComm::abort() { impl_->do_abort(); }


}  // namespace kiln::cuda
