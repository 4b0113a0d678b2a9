// A thin NCCL communicator: one per (rank, GPU). Collectives run in place on a communication stream
// of their own that first waits for everything queued on the device's compute stream so far (so
// they follow the kernels that produced the gradients, and the kernels queued after them, the rest
// of backward, run alongside); synchronize() waits for them with a timeout (polling
// ncclCommGetAsyncError), orders the compute stream after them, and aborts the communicator on
// error or timeout, so a dead peer becomes a kiln::Error instead of a hang.
//   - one process driving several GPUs: create_local({0, 1, ...}) (ncclCommInitAll), one thread per GPU;
//   - several processes: rank 0 calls unique_id(), sends the bytes to every rank (MPI), each rank
//     constructs NcclComm(id, nranks, rank, device, timeout).
// abort() may be called from another thread than the one waiting in synchronize() (it unblocks it).
// Plain C++ header (no NCCL types): include under #ifdef KILN_WITH_CUDA. Tests: tests/gpu/nccl_test.cpp.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/comm.h"
#include "core/tensor.h"

namespace kiln::cuda {

enum class ReduceOp { sum, avg, min };

class NcclComm {
 public:
  // ncclGetUniqueId's 128 opaque bytes.
  static std::string unique_id();
  // One rank of a communicator across processes; gives up after timeout_s if the others do not join.
  NcclComm(const std::string& unique_id, int nranks, int rank, int device, double timeout_s = 300.0);
  // One communicator per device, all in this process (rank i drives devices[i]).
  static std::vector<std::unique_ptr<NcclComm>> create_local(const std::vector<int>& devices);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const;
  int size() const;
  int device() const;

  // In place; `t` packed, on this communicator's device, f32/f16/bf16/f64/i32/i64/u8 (avg: floating).
  void all_reduce(const Tensor& t, ReduceOp op);
  void broadcast(const Tensor& t, int root);
  // Waits until every queued collective is done (and with it the compute-stream work each waited
  // for); later compute-stream work is ordered after them. Throws (after aborting the
  // communicator) when NCCL reports an error or timeout_s passes first.
  void synchronize(double timeout_s);
  // Aborts the communicator (unblocks peers' pending collectives with an error); later calls throw.
  void abort();
  bool aborted() const;

 private:
  struct Impl;
  explicit NcclComm(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// kiln::Communicator over an NcclComm, for data-parallel training on GPUs (tools/engine/trainer.cpp): the
// collectives take tensors on the communicator's device and run on its communication stream (after
// the kernels that produced them, beside the ones queued later); Work::wait() waits for them under
// the communicator's timeout, and a
// timeout or NCCL error aborts the communicator and throws naming the rank. all_reduce_doubles and
// all_reduce_min stage their few values through the device. `also` (optional) is kept alive with it
// and aborted with it: the MPI communicator that handed out the NCCL id, so abort() ends the job.
std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<NcclComm> nccl,
                                                     std::unique_ptr<Communicator> also = nullptr);


}  // namespace kiln::cuda
