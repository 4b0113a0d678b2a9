// How a run is started: one process alone, one replica per GPU of this process (each on its own
// thread, NCCL between them), or one rank of an mpirun job. Each replica runs train_replica()
// (tools/engine/trainer.cpp), the training loop itself. train() captures the console for the run
// folder's train.log (tools/engine/console_log.h).
#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/comm.h"
#include "core/device.h"
#include "tools/engine/console_log.h"
#include "tools/engine/mpi_comm.h"
#include "tools/engine/trainer.h"

namespace kiln {

namespace {

// The GPU a rank of an mpirun job trains on: its local rank's entry of train.device, or with the
// default device the GPU numbered by its local rank; CPU ranks where the device is "cpu" or the
// machine has no GPU.
Device device_for_mpi_rank(const std::string& device_option, int rank) {
  const int local = local_rank();
  if (device_option.empty()) {
    const int n = cuda_device_count();
    if (n == 0) return Device::cpu();
    KILN_CHECK(local < n, "rank ", rank, " is local rank ", local, " of its machine, which has ", n,
               " GPU(s): start at most ", n, " ranks per machine (one GPU each), or train on CPU ranks with device=cpu");
    return Device::cuda(local);
  }
  std::vector<Device> devices = parse_device_list(device_option);
  if (devices.size() == 1 && devices[0].is_cpu()) return devices[0];
  KILN_CHECK(local < static_cast<int>(devices.size()), "train.device = \"", device_option, "\" lists ", devices.size(),
             " device(s) for the ranks of a machine, but rank ", rank, " is local rank ", local,
             "; list one GPU per rank of a machine (device=0,1 for 2 ranks) or leave device unset");
  return devices[static_cast<size_t>(local)];
}

}  // namespace

TrainResult train_replicas(const json& config, const std::vector<Device>& devices,
                           std::vector<std::unique_ptr<Communicator>> comms, bool quiet) {
  KILN_CHECK(!devices.empty() && devices.size() == comms.size(), "train_replicas: ", devices.size(), " devices and ",
             comms.size(), " communicators");
  const size_t n = devices.size();
  std::vector<TrainResult> results(n);
  std::mutex mu;
  std::exception_ptr first_error;  // the first replica to fail: the cause; the others follow from it
  std::vector<std::thread> threads;
  for (size_t i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      try {
        results[i] = train_replica(config, quiet, *comms[i], devices[i]);
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu);
        if (!first_error) {
          first_error = std::current_exception();
          // Wake every replica waiting in a collective, all at once: NCCL's abort of one rank waits
          // for its peers' (one by one, each would stall up to its 10 s limit).
          for_each_concurrently(comms, [](std::unique_ptr<Communicator>& c) { c->abort(1); });
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  destroy_concurrently(comms);  // not one by one: NCCL's destroy waits for its peers (core/comm.h)
  if (first_error) std::rethrow_exception(first_error);
  return results[0];
}

namespace {

TrainResult train_launched(const json& config, bool quiet, std::unique_ptr<Communicator> mpi) {
  const TrainOptions topt = TrainOptions::from_json(config.value("train", json::object()), "train");
  const std::string& device_option = topt.device;
  if (mpi) {  // one replica per process
    Device device = device_for_mpi_rank(device_option, mpi->rank());
    if (!has_device_communicators(device)) return train_replica(config, quiet, *mpi, device);  // MPI between ranks
    // The gradients go over the devices' communicator (NCCL between GPUs); MPI hands every rank
    // rank 0's communicator id.
    Tensor id = Tensor::zeros({128}, DType::u8);
    if (mpi->rank() == 0) {
      std::string uid = communicator_id(device);
      std::memcpy(id.raw_data(), uid.data(), std::min<size_t>(uid.size(), 128));
    }
    mpi->broadcast(id, 0);
    const int rank = mpi->rank(), size = mpi->size();
    std::unique_ptr<Communicator> comm =
        make_device_communicator(std::string(static_cast<const char*>(id.raw_data()), 128), size, rank, device,
                                 topt.comm_timeout_s, std::move(mpi));
    return train_replica(config, quiet, *comm, device);
  }
  std::vector<Device> devices = parse_device_list(device_option);
  if (devices.size() == 1) {
    std::unique_ptr<Communicator> comm = make_single_rank_communicator();
    return train_replica(config, quiet, *comm, devices[0]);
  }
  // One process driving several GPUs: a replica per GPU, each on its own thread, NCCL between them.
  return train_replicas(config, devices, make_local_communicators(devices), quiet);
}

}  // namespace

TrainResult train_once(const json& config, bool quiet) {
  std::unique_ptr<Communicator> mpi = launched_by_mpirun() ? make_mpi_communicator() : nullptr;
  // The console from here on goes to the run folder's train.log too (rank 0's: the one that prints).
  std::optional<ConsoleCapture> console;
  if (!mpi || mpi->rank() == 0) console.emplace();
  try {
    return train_launched(config, quiet, std::move(mpi));
  } catch (const std::exception& e) {
    if (console) console->note(std::string("kiln: error: ") + e.what());  // the line the CLI prints
    throw;
  }
}

}  // namespace kiln
