// Communicator: the collectives data-parallel training needs. Implementations: a single-rank
// communicator (here), MPI between processes (tools/engine/mpi_comm.cpp, CPU tensors), NCCL between GPUs
// (core/cuda/, created by the functions at the end through the kernel slots). Collectives are started asynchronously and return a Work to wait on, so gradient
// buckets can be reduced while backward goes on. Every wait has a timeout: a peer that does not
// arrive makes the collective throw an Error naming the collective and the ranks that were
// missing, instead of hanging. Tests: tests/optim/grad_sync_test.cpp, tests/mpi/.
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/kernel_slot.h"
#include "core/tensor.h"

namespace kiln {

class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the collective is done; throws on timeout or failure.
  virtual void wait() = 0;
  // Non-blocking: drives progress and returns true when done.
  virtual bool test() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;
  // In-place sum over ranks (f32/f64 tensors, contiguous).
  virtual std::unique_ptr<Work> all_reduce_sum_async(const Tensor& t) = 0;
  void all_reduce_sum(const Tensor& t) { all_reduce_sum_async(t)->wait(); }
  // In-place: every rank gets root's values.
  virtual void broadcast(const Tensor& t, int root) = 0;
  virtual void barrier() = 0;
  // Sums a few doubles (metrics); blocking.
  virtual void all_reduce_doubles(std::vector<double>& v) = 0;
  // Minimum of one integer over ranks (AutoBatch agrees on a batch size).
  virtual int64_t all_reduce_min(int64_t v) = 0;
  // Ends the whole job after an unrecoverable error on this rank (MPI_Abort, ncclCommAbort).
  virtual void abort(int code) = 0;

  void set_timeout(std::chrono::milliseconds t) { timeout_ = t; }
  std::chrono::milliseconds timeout() const { return timeout_; }

 protected:
  std::chrono::milliseconds timeout_{std::chrono::minutes(10)};
};

// One rank: every collective is the identity.
std::unique_ptr<Communicator> make_single_rank_communicator();

// `n` ranks that are threads of this process, one communicator each (rank i = element i); the
// collectives meet in shared memory (contiguous CPU tensors, f32/f64/i64). Every rank must call
// the same collectives in the same order, each from its own thread. A rank that waits past the
// timeout throws an Error naming the ranks that did not arrive; abort() (called by a rank that
// failed) wakes every waiting rank with an Error naming it. This runs the one-process,
// several-replica trainer (train.device "0,1" drives its GPUs this way, with NCCL for the
// gradients) on CPU replicas in tests.
std::vector<std::unique_ptr<Communicator>> make_thread_communicators(int n);

// Communicators between devices (NCCL between GPUs), created through the devices' kernel slots
// (declared at the end), so the trainer names no backend. A device without them (the CPU: its ranks
// use MPI or threads) fails with "<function>: no cpu kernel"; a GPU in a build without CUDA with
// check_available's "<function>: device <device> is not available: kiln was built without CUDA".
// Across processes: rank 0 calls communicator_id(device) and hands the bytes to every rank (e.g. by
// MPI broadcast); each rank then joins with make_device_communicator(), which gives up after
// timeout_s when the others do not. `also` (optional) is kept alive and aborted with it: the MPI
// communicator that handed out the id, so abort() ends the job.
std::string communicator_id(Device device);
// Whether `device` has communicators of its own between processes (NCCL between GPUs); a device
// without (the CPU) reduces over the processes' own communicator (MPI, tools/engine/mpi_comm.h).
bool has_device_communicators(Device device);
std::unique_ptr<Communicator> make_device_communicator(const std::string& id, int nranks, int rank, Device device,
                                                       double timeout_s, std::unique_ptr<Communicator> also = nullptr);
// One process driving several devices of one kind: one communicator per device (rank i drives
// devices[i]), each to be used from its own thread. Release them with destroy_concurrently().
std::vector<std::unique_ptr<Communicator>> make_local_communicators(const std::vector<Device>& devices);

// f(comm) for each of one process's communicators at once, each on a thread of its own: NCCL's
// destroy and abort of one rank wait for the other ranks of the node, so one after the other from
// one thread the first would wait for ever (destroy) or for its time limit (abort).
template <typename C, typename F>
void for_each_concurrently(std::vector<std::unique_ptr<C>>& comms, F f) {
  std::vector<std::thread> threads;
  for (auto& c : comms) threads.emplace_back([&c, &f] { f(c); });
  for (auto& t : threads) t.join();
}
// Releases them that way (an aborted communicator is only freed). For any communicator type
// (cuda::NcclComm in the GPU tests).
template <typename C>
void destroy_concurrently(std::vector<std::unique_ptr<C>>& comms) {
  for_each_concurrently(comms, [](std::unique_ptr<C>& c) { c.reset(); });
}

// --- the communicator kernels (core/kernel_slot.h), filled by a device with a collective library
// (NCCL on CUDA; the CPU fills none): the id rank 0 creates and hands to every rank (opaque bytes);
// one rank of a communicator across processes (`also`, if given, is kept alive and aborted with
// it); one communicator per device, all in this process (rank i drives device index indices[i]).
extern KernelSlot<std::string (*)()> communicator_id_kernel;
extern KernelSlot<std::unique_ptr<Communicator> (*)(const std::string& id, int nranks, int rank, int index,
                                                    double timeout_s, std::unique_ptr<Communicator> also)>
    make_communicator_kernel;
extern KernelSlot<std::vector<std::unique_ptr<Communicator>> (*)(const std::vector<int>& indices)>
    make_local_communicators_kernel;

}  // namespace kiln
