// The trainer: `kiln train CONFIG [key=value ...]` and `kiln eval`. A config has the sections
//
//   "name":     run name (runs/<name>/)                       "model":    models/registry.h
//   "data":     data/config.h (batch_size is the GLOBAL batch) "optim":    optim/optimizer.h
//   "schedule": optim/lr_schedule.h                           "train":    TrainOptions below
//
// One process trains on one device, or is one rank of `mpirun -np N` (CPU ranks, or one GPU per
// rank). Rank 0 broadcasts the initial weights, every rank reads its own shard of the data, the
// gradients are averaged in buckets during backward (optim/grad_sync.h), and only rank 0 writes
// logs and checkpoints; evaluation counts are summed over ranks.
// Tests: tests/engine/trainer_test.cpp, tests/engine/finetune_test.cpp (train.init, train.freeze), tests/slow/, tests/mpi/.
#pragma once
#include <concepts>
#include <memory>
#include <string>
#include <vector>

#include "core/comm.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/json_reader.h"
#include "tools/engine/train_options.h"

namespace kiln {

struct TrainResult {
  double val_top1 = 0, val_top5 = 0, val_loss = 0;
  double ema_val_top1 = 0, ema_val_top5 = 0, ema_val_loss = 0;  // with train.ema (0 otherwise)
  int64_t accumulate = 1;  // micro-batches per optimizer step (train.accumulate, "auto"'s choice)
  double train_loss = 0, train_acc = 0;
  double images_per_s = 0;
  double data_wait_share = 0;
  int64_t batch = 0;  // the global batch trained with (AutoBatch's choice with batch=-1)
  int64_t steps = 0;
  int64_t epochs = 0;  // the run's train.epochs: the config's, or train.time_budget_minutes' choice
  int64_t skipped_steps = 0;  // fp16: steps skipped for a non-finite gradient (0 otherwise)
  double loss_scale = 0;      // fp16: the loss scale at the end (0 otherwise)
  double peak_bytes = 0;  // the device allocator's peak during training, above the model's weights
                          // (activations, gradients, optimizer state, workspaces; this rank's)
  double autobatch_target_bytes = 0;  // with AutoBatch: the memory it aimed at (0 otherwise)
  std::string run_dir;  // the run folder; empty on every rank but the first under mpirun (rank 0 writes it)
  // SIGINT/SIGTERM (tools/engine/interrupt.h): the signal that stopped the run after saving its `last`
  // checkpoint (0: the run ran to its end); the figures above are then those of the last epoch ended.
  int interrupted = 0;
  // train.early_stopping ended the run after this epoch (1-based), before train.epochs; 0 otherwise.
  int64_t stopped_early = 0;
  // The CPU threads the training computations used (train.threads, or OMP_NUM_THREADS where set, or
  // OpenMP's default): omp_get_max_threads() on the training thread.
  int64_t threads = 0;
  // The precision trained in: train.precision, "auto" decided (tools/engine/precision_probe.h).
  std::string precision;
};

// Trains with `config` (a full config, overrides applied). `quiet` suppresses progress output.
// A stop request (tools/engine/interrupt.h: SIGINT/SIGTERM under a SignalWatch, or request_signal)
// ends it after the step in flight with a saved checkpoint (TrainResult::interrupted); a save
// request (SIGUSR1) saves one and goes on.
// After the last epoch's evaluation rank 0 writes the classification report (tools/engine/report.h:
// report.csv, report.json, confusion.csv, confusion.png, confused_pairs.csv) into the run folder.
//   - one device: this process trains alone;
//   - train.device listing several GPUs ("0,1"): one replica per GPU, each on its own thread, with
//     an NCCL communicator per GPU (the global batch split evenly between them);
//   - started by mpirun: this process is one rank; its GPU is picked by its local rank (or it is a
//     CPU rank), with NCCL between GPU ranks (MPI hands out the NCCL id) and MPI between CPU ranks.
// Returns rank 0's result.
TrainResult train_once(const json& config, bool quiet);
inline TrainResult train(const json& config) { return train_once(config, false); }
// train(config, quiet): a template taking bool alone, so that train(config, {"epochs=3"}) calls train_api.h's
// train(config, overrides) instead of turning the string into a bool.
template <std::same_as<bool> Bool>
TrainResult train(const json& config, Bool quiet) {
  return train_once(config, quiet);
}

// Runs one replica of `config` per device, each on its own thread with comms[i] (rank i of
// comms.size()); returns rank 0's result. If a replica fails, every communicator is aborted so the
// others stop too, and the first failure is rethrown. train() uses it with NCCL communicators; tests
// run it on CPU replicas with make_thread_communicators (core/comm.h).
TrainResult train_replicas(const json& config, const std::vector<Device>& devices,
                           std::vector<std::unique_ptr<Communicator>> comms, bool quiet = false);

// One replica: trains `config` on `device` as rank comm.rank() of comm.size() (the whole job when
// the size is 1). train() and train_replicas() (tools/engine/train_launch.cpp) start one per process or
// per GPU; tools/engine/trainer.cpp holds it, as the phases of tools/engine/replica_run.h.
TrainResult train_replica(const json& config, bool quiet, Communicator& comm, Device device);

// Checks the config's sections as the trainer reads them (the top level, train, data), without
// building anything or reading data files; throws the reader's error (naming the key and what is
// accepted). `kiln train RUN` checks the run's config.json with it before resuming.
void check_config(const json& config);

struct EvalResult {
  double top1 = 0, top5 = 0, loss = 0;
  int64_t samples = 0;
  std::vector<std::vector<int64_t>> confusion;  // [true][predicted]
  std::vector<std::string> class_names;         // one per class, or empty (reports number them)
};
// Evaluates the weights file (safetensors, PyTorch layout) on the validation split.
EvalResult evaluate(const json& config, const std::string& weights);

}  // namespace kiln
