// DataLoader: turns a Dataset and a Pipeline into batches
//   images (N, H, W, C) f32 or bf16, normalised;  labels (N) i64
//   or, with dtype "u8", images (N, H, W, C) u8: the pipeline's pixels before its final normalize,
//   with that normalize's mean and std in Batch::normalize for the consumer to apply on its device
//   (ops::normalize_u8, core/ops/normalize_u8.h: the same values as the f32/bf16 batches)
// Worker threads each fill WHOLE batches (decode, augment, normalise straight into the batch
// buffer) and the consumer receives them strictly in order. Buffers come from a ring of
// preallocated slots; at most `prefetch` batches are prepared ahead of the consumer, and a slot goes
// back to the ring when the last tensor of the batch it holds is released.
//
// Determinism: the sample order of an epoch is a function of (seed, epoch) and each sample's
// augmentation of (seed, epoch, dataset index), so the batches are identical for any number of
// workers, and a sample is augmented the same way whatever rank or batch it lands in.
//
// Sharding (rank r of world_size W, as torch's DistributedSampler): every rank gets the same
// number of samples, positions r, r + W, r + 2W, ... of the epoch's order. With drop_last the
// order is cut to a multiple of W (and the last partial batch dropped); without, it is padded by
// repeating its first samples, and Batch::padding counts the repeats (only ever at the end of a
// rank's last batch) so an evaluation can skip them and count every sample exactly once.
//
// Errors raised while loading a sample (a damaged file, a crop that does not fit) are caught in the
// worker and rethrown by next() for that batch, as kiln::Error naming the sample index, dataset and
// original message. With skip_bad_samples, a sample whose source fails (an unreadable or damaged
// file; not a transform error) is replaced deterministically by the next readable dataset index and
// augmented as that index would be; LoaderStats counts them and keeps the first messages, and more
// than max_bad_fraction of the epoch's samples fails the epoch. Each loader counts its own split
// (the validation loader has its own limit). When the last batch of an epoch is delivered, a loader
// that skipped samples in it reports them (dataset name with its split, count, the first paths and
// errors) through its reporter, by default one "kiln: warning: ..." block on stderr. Batch::indices
// keeps the planned index of a replaced sample.
//
// Batch buffers come from empty_pinned() (page-locked when CUDA is present, so the trainer's copy
// to the GPU is asynchronous); a worker waits for the copies that read a buffer before refilling it. stop() (also called by the destructor) joins the workers at any point of an
// epoch. Tests: tests/data/loader_test.cpp, tests/data/hardened_input_test.cpp (reports).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/tensor.h"
#include "data/dataset.h"
#include "core/json_reader.h"
#include "data/pipeline.h"
#include "data/progressive.h"

namespace kiln {

struct LoaderOptions {
  /// samples per optimizer step over all ranks, the global batch: each of N ranks loads batch_size / N
  /// (it must divide); -1: AutoBatch picks it (60% of free memory, train.autobatch_fraction), a
  /// fraction in (0, 1): AutoBatch at that share (docs/training.md, "Batch size and AutoBatch");
  /// a DataLoader built directly delivers batches of this size (default 64)
  int64_t batch_size = 64;
  /// visit the samples in a new random order every epoch (default true)
  bool shuffle = true;
  /// drop the samples that do not fill a last whole batch, and the remainder of the sharding
  /// instead of padding it (default false)
  bool drop_last = false;
  /// threads that fill batches; 0 loads them in the caller's thread inside next(); "auto": the
  /// cores this process may run on, minus one for the training thread, at least 1 (auto_workers();
  /// the config records the number) (default 2)
  int64_t workers = 2;
  /// batches prepared ahead of the consumer, at least 1; below `workers` some workers idle; "auto"
  /// (or 0): workers + 2 (auto_prefetch(); docs/data.md, "Sizing") (default "auto")
  int64_t prefetch = 0;
  /// decode a random_resized_crop's box at a reduced JPEG DCT scale M/8 that keeps the output size
  /// (faster; the pixels differ slightly from a full-scale decode: docs/data.md, "Scaled region
  /// decoding"); false: always full scale (default true)
  bool fast_decode = true;
  /// seed of the sample order and of the augmentations (default 0)
  uint64_t seed = 0;
  /// element type of the image batches: "f32" or "bf16" (normalised on the CPU), or "u8" (the
  /// pixels before the transforms' final normalize, which the consumer applies: data.upload,
  /// docs/data.md; the transforms must end with normalize) (default "f32")
  std::string dtype = "f32";
  /// replace a sample whose file cannot be read or decoded by the next readable one (dataset index
  /// + 1, + 2, ..., wrapping; at most 100 tried) instead of failing its batch; each is counted in
  /// LoaderStats::skipped (default false)
  bool skip_bad_samples = false;
  /// with skip_bad_samples: the epoch fails once more than this fraction of the rank's samples of
  /// the epoch were bad, in [0, 1] (default 0.01)
  double max_bad_fraction = 0.01;

  // workers = "auto": the CPUs in this process's affinity mask (sched_getaffinity: respects taskset
  // and cgroup cpusets; std::thread::hardware_concurrency where unavailable) minus one, in [1, 256].
  static int64_t auto_workers();
  // prefetch = "auto": `workers` batches being filled plus two ready ahead of the consumer.
  static int64_t auto_prefetch(int64_t workers) { return workers + 2; }
  // The prefetch depth in use: `prefetch`, or auto_prefetch(workers) when it is 0.
  int64_t prefetch_depth() const { return prefetch > 0 ? prefetch : auto_prefetch(workers); }

  static LoaderOptions from_json(const Json& j, const std::string& path = "loader");
  // Reads the fields above from an object that holds other keys too (the data config).
  static void read_fields(JsonReader& r, LoaderOptions& o);
  Json to_json() const;
};
KILN_JSON_CONVERSIONS(LoaderOptions)

// This process's part of a data-parallel run.
struct Shard {
  int64_t rank = 0;
  int64_t world_size = 1;
};

struct Batch {
  Tensor images;                 // (N, H, W, C), f32 or bf16 (normalised), or u8 (not yet: see normalize)
  // The pipeline's normalize (mean, std per channel, or one value for all). For u8 images the
  // consumer applies it (ops::normalize_u8(images, normalize.mean, normalize.std, dtype)); f32/bf16
  // images already carry it.
  NormalizeOptions normalize = {};
  Tensor labels;                 // (N), i64
  std::vector<int64_t> indices;  // dataset index of each sample (as planned; see skip_bad_samples)
  int64_t padding = 0;           // trailing samples that repeat others to even out the ranks
  int64_t epoch = 0;
  int64_t index = 0;  // batch number within the epoch
  int64_t size() const { return static_cast<int64_t>(indices.size()); }
};

struct LoaderStats {
  double wait_seconds = 0.0;  // time next() spent waiting for (or, with 0 workers, loading) batches
  int64_t batches = 0;
  int64_t samples = 0;
  int64_t skipped = 0;                   // bad samples replaced (skip_bad_samples)
  std::vector<std::string> bad_samples;  // the errors of the first kMaxBadNames of them (each names the file)
  static constexpr size_t kMaxBadNames = 5;
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, Pipeline pipeline, LoaderOptions options, Shard shard = {});
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  int64_t samples_per_epoch() const { return per_rank_; }  // this rank's, padding included
  int64_t batches_per_epoch() const;
  ImageShape image_shape() const { return out_shape_; }  // of one sample in a batch (before progressive resizing)
  // The shape of one sample in the batches of `epoch` (counted from 0): image_shape(), or the
  // progressive-resize schedule's size for that epoch.
  ImageShape epoch_image_shape(int64_t epoch) const;
  // After the transforms, resizes each image of epoch e to progressive.size_at(e) (data/progressive.h).
  // Throws, naming data.progressive_resize, when the schedule does not suit the transforms' output
  // (not square, or max_size above it). Takes effect at the next start_epoch().
  void set_progressive_resize(const ProgressiveResizeOptions& progressive);
  const ProgressiveResizeOptions& progressive_resize() const { return progressive_; }
  DType dtype() const { return dtype_; }
  const Dataset& dataset() const { return *dataset_; }
  const LoaderOptions& options() const { return o_; }
  const Shard& shard() const { return shard_; }

  // This rank's dataset indices for `epoch`, in the order batches deliver them (padding included).
  std::vector<int64_t> epoch_indices(int64_t epoch) const;

  // Begins `epoch` at its batch `first_batch` (0: the start; a resumed run's position inside the
  // epoch, at most batches_per_epoch()): abandons what is left of the current one, then the workers
  // start on it. Batch b is the same whatever batch the epoch started at (see Determinism).
  void start_epoch(int64_t epoch, int64_t first_batch = 0);
  // The epoch's next batch, in order; false after the last. Its tensors stay valid while held.
  // Rethrows an error raised while loading this batch (and again on later calls until the next
  // start_epoch).
  bool next(Batch& out);
  // Joins the workers, mid-epoch too. The next start_epoch() starts them again.
  void stop();

  LoaderStats stats() const;
  void reset_stats();

  // Receives the end-of-epoch report of skipped samples (see above); null = the default, stderr.
  using Reporter = std::function<void(const std::string& report)>;
  void set_reporter(Reporter r);

  struct State;  // internal; shared with the delivered batches, which hold their buffer slots

 private:
  bool fill(int64_t b, int slot, uint64_t generation, Pipeline::Workspace& ws, Sample& sample);
  struct Loaded {
    int64_t index = 0;    // the dataset index actually loaded (a replacement with skip_bad_samples)
    bool region = false;  // only the first crop's region was decoded, at `box`
    CropBox box;
  };
  // Loads dataset index j, only the first crop's region when the source and pipeline allow it.
  Loaded load_one(int64_t j, uint64_t epoch, Sample& sample);
  // load_one(idx); with skip_bad_samples a bad sample is counted and replaced.
  Loaded load(int64_t idx, uint64_t epoch, Sample& sample);
  void worker_main();
  void make_batch(int64_t b, int slot, Batch& out);
  void cancel_locked(std::unique_lock<std::mutex>& lk);

  std::shared_ptr<const Dataset> dataset_;
  Pipeline pipeline_;
  LoaderOptions o_;
  Shard shard_;
  DType dtype_ = DType::f32;
  ImageShape out_shape_;
  ProgressiveResizeOptions progressive_;
  int64_t per_rank_ = 0;
  std::shared_ptr<State> st_;
  std::vector<std::thread> threads_;
  // The caller's workspace when workers == 0.
  Pipeline::Workspace sync_ws_;
  Sample sync_sample_;
  Reporter reporter_;
};

}  // namespace kiln
