// DataLoader (see loader.h). One mutex guards the shared state; workers touch it twice per batch
// (claim, deliver), so it is never contended at the rates a loader runs (thousands of batches/s).
//
// Life of a batch b:  claimed by a worker (b < next_deliver + prefetch) -> filled into a free slot
// without the lock -> put in `ready` -> taken by next() in order -> wrapped in tensors holding a
// SlotLease -> the slot returns to `free_slots` when the last of those tensors goes away.
// `generation` changes on start_epoch() and stop(); a worker that sees it change abandons its batch
// between two samples and gives its slot back.
#include "data/loader.h"

#include <algorithm>
#include <charconv>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <numeric>
#ifdef __linux__
#include <sched.h>
#endif

#include "core/check.h"
#include "core/pinned.h"
#include "data/resize.h"

namespace kiln {

// --- options --------------------------------------------------------------------------------------

int64_t LoaderOptions::auto_workers() {
  int64_t cores = 0;
#ifdef __linux__
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) cores = CPU_COUNT(&set);
#endif
  if (cores <= 0) cores = static_cast<int64_t>(std::thread::hardware_concurrency());
  return std::clamp<int64_t>(cores - 1, 1, 256);
}

namespace {
// A count that may also be "auto" (true; `out` untouched); a number goes through r.read. `def` and
// `accepted` are what `kiln config keys` lists (noted first: the typed read below would say "integer").
bool read_auto(JsonReader& r, const std::string& key, int64_t& out, const Json& def, const std::string& accepted) {
  if (KeyRecorder* rec = KeyRecorder::current()) rec->note({r.path_of(key), "integer or \"auto\"", def, true, false, accepted});
  const Json* v = r.find(key);
  if (!v || !v->is_string()) {
    r.read(key, out);
    return false;
  }
  const std::string text = v->get<std::string>();
  if (text == "auto") return true;
  // A number typed over a config's "auto" on the command line (data.workers=4: the override keeps a
  // string key's text) arrives as the string "4": read as the number.
  int64_t n = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, n);
  KILN_CHECK(!text.empty() && ec == std::errc() && ptr == end, r.path_of(key),
             " must be an integer or \"auto\", not a string ", v->dump());
  out = n;
  return false;
}
}  // namespace

void LoaderOptions::read_fields(JsonReader& r, LoaderOptions& o) {
  r.read("batch_size", o.batch_size);
  r.read("shuffle", o.shuffle);
  r.read("drop_last", o.drop_last);
  if (read_auto(r, "workers", o.workers, o.workers, "0..256")) o.workers = auto_workers();
  KILN_CHECK(o.workers >= 0 && o.workers <= 256, r.path_of("workers"), ": must be in [0, 256] or \"auto\", got ", o.workers);
  const bool given = r.find("prefetch") != nullptr;
  if (read_auto(r, "prefetch", o.prefetch, "auto", ">= 0")) o.prefetch = 0;
  else if (given) KILN_CHECK(o.prefetch >= 0, r.path_of("prefetch"), ": must be at least 1, or 0 or \"auto\" (workers + 2), got ", o.prefetch);
  o.prefetch = o.prefetch_depth();  // "auto" resolved: the number is what the config records
  r.read("fast_decode", o.fast_decode);
  r.read("seed", o.seed);
  r.read("dtype", o.dtype);
  r.read("skip_bad_samples", o.skip_bad_samples);
  r.read("max_bad_fraction", o.max_bad_fraction);
  KILN_CHECK(o.batch_size > 0, r.path_of("batch_size"), ": must be positive, got ", o.batch_size);
  check_choice(o.dtype, {"f32", "bf16", "u8"}, r.path_of("dtype"));
  KILN_CHECK(o.max_bad_fraction >= 0 && o.max_bad_fraction <= 1, r.path_of("max_bad_fraction"),
             ": a fraction in [0, 1], got ", o.max_bad_fraction);
}

LoaderOptions LoaderOptions::from_json(const Json& j, const std::string& path) {
  LoaderOptions o;
  JsonReader r(j, path);
  read_fields(r, o);
  r.finish();
  return o;
}

Json LoaderOptions::to_json() const {
  return Json{{"batch_size", batch_size}, {"shuffle", shuffle}, {"drop_last", drop_last}, {"workers", workers},
              {"prefetch", prefetch_depth()}, {"fast_decode", fast_decode}, {"seed", seed}, {"dtype", dtype},
              {"skip_bad_samples", skip_bad_samples},       {"max_bad_fraction", max_bad_fraction}};
}

// --- shared state ---------------------------------------------------------------------------------

struct DataLoader::State {
  // One batch buffer; images and labels are pinned when CUDA is present (core/pinned.h), so
  // their copies to a GPU do not block the training loop.
  struct Slot {
    Tensor images;  // (batch_size, h * w * c) of the loader's dtype
    Tensor labels;  // (batch_size) i64
  };
  struct Ready {
    int slot = -1;
    std::exception_ptr error;
  };

  std::mutex mu;
  std::condition_variable work_cv;  // workers: a batch can be claimed, or stop
  std::condition_variable done_cv;  // consumer: a batch is ready, a worker went idle, or stop
  Shape image_shape;                // per slot: (batch_size, h * w * c)
  DType dtype = DType::f32;
  int64_t batch_size = 0;
  std::vector<Slot> slots;
  std::vector<int> free_slots;

  // The current epoch. `indices` and `epoch` change only while no worker is filling (busy == 0),
  // so workers read them without the lock.
  std::atomic<uint64_t> generation{0};
  bool stopping = false;
  bool started = false;  // start_epoch() called since construction / stop()
  bool active = false;   // workers may claim batches
  bool failed = false;   // a batch of this epoch failed: claim no more
  int64_t epoch = 0;
  ImageShape shape;  // of one sample in this epoch's batches (progressive resizing)
  int64_t num_batches = 0, next_claim = 0, next_deliver = 0;
  int busy = 0;
  std::vector<int64_t> indices;
  std::map<int64_t, Ready> ready;
  std::exception_ptr error;  // rethrown by next() until the next start_epoch()
  LoaderStats stats;
  int64_t epoch_bad = 0;  // bad samples of the current epoch (skip_bad_samples)
  std::vector<std::string> epoch_bad_names;  // the first LoaderStats::kMaxBadNames errors of them

  bool can_claim(int64_t prefetch) const {
    return active && !failed && next_claim < num_batches && next_claim < next_deliver + prefetch;
  }
  int take_slot() {
    if (free_slots.empty()) add_slot();
    int s = free_slots.back();
    free_slots.pop_back();
    return s;
  }
  void add_slot() {
    Slot s;
    s.images = empty_pinned(image_shape, dtype);
    s.labels = empty_pinned({batch_size}, DType::i64);
    slots.push_back(std::move(s));
    free_slots.push_back(static_cast<int>(slots.size()) - 1);
  }
  void drop_ready() {
    for (auto& [b, r] : ready)
      if (r.slot >= 0) free_slots.push_back(r.slot);
    ready.clear();
  }
};

namespace {
// Held (through tensor deleters) by the tensors of a delivered batch; frees the slot at the end.
struct SlotLease {
  SlotLease(std::shared_ptr<DataLoader::State> s, int i) : st(std::move(s)), slot(i) {}
  SlotLease(const SlotLease&) = delete;  // exactly one lease frees a slot
  SlotLease& operator=(const SlotLease&) = delete;
  ~SlotLease();
  std::shared_ptr<DataLoader::State> st;
  int slot;
};

Tensor wrap(void* data, const Shape& shape, DType dtype, const std::shared_ptr<SlotLease>& lease) {
  auto impl = std::make_shared<TensorImpl>();
  size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  impl->storage = std::make_shared<Storage>(data, bytes, Device::cpu(), [lease](void*) {});
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}
}  // namespace

SlotLease::~SlotLease() {
  std::lock_guard<std::mutex> lk(st->mu);
  st->free_slots.push_back(slot);
}

// --- DataLoader -----------------------------------------------------------------------------------

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, Pipeline pipeline, LoaderOptions options, Shard shard)
    : dataset_(std::move(dataset)), pipeline_(std::move(pipeline)), o_(std::move(options)), shard_(shard) {
  KILN_CHECK(dataset_, "DataLoader: no dataset");
  const std::string who = "DataLoader for " + dataset_->name();
  KILN_CHECK(o_.batch_size > 0, who, ": batch_size must be positive, got ", o_.batch_size);
  KILN_CHECK(o_.workers >= 0 && o_.workers <= 256, who, ": workers must be in [0, 256], got ", o_.workers);
  KILN_CHECK(o_.prefetch >= 0, who, ": prefetch must be at least 1 (or 0: auto), got ", o_.prefetch);
  o_.prefetch = o_.prefetch_depth();
  KILN_CHECK(shard_.world_size >= 1 && shard_.rank >= 0 && shard_.rank < shard_.world_size, who, ": rank ",
             shard_.rank, " is not in [0, world_size ", shard_.world_size, ")");
  KILN_CHECK(o_.dtype == "f32" || o_.dtype == "bf16" || o_.dtype == "u8", who,
             ": dtype must be f32, bf16 or u8, got ", o_.dtype);
  dtype_ = o_.dtype == "bf16" ? DType::bf16 : o_.dtype == "u8" ? DType::u8 : DType::f32;
  KILN_CHECK(dtype_ != DType::u8 || pipeline_.has_normalize(), who,
             ": dtype u8 (data.dtype, or data.upload = \"u8\") delivers the pixels before the final normalize, "
             "but the transforms (data.train_transforms / data.val_transforms) do not end with one; add "
             "{\"type\": \"normalize\", \"mean\": [...], \"std\": [...]} as their last step, or use data.upload = \"float\"");
  try {
    out_shape_ = pipeline_.output_shape(dataset_->image_shape());
  } catch (const Error& e) {
    throw Error(who + ": " + e.what());  // keeps the one source location already in e
  }
  KILN_CHECK(out_shape_.known(), who, ": the transforms give images of varying size (", out_shape_.str(),
             "); end them with a fixed-size crop so that samples stack into a batch");

  const int64_t n = dataset_->size(), w = shard_.world_size;
  KILN_CHECK(n > 0, who, ": the dataset is empty");
  per_rank_ = o_.drop_last ? n / w / o_.batch_size * o_.batch_size : (n + w - 1) / w;
  KILN_CHECK(per_rank_ > 0, who, ": ", n, " samples over ", w, " ranks leave no whole batch of ", o_.batch_size,
             " per rank with drop_last; lower batch_size or set drop_last to false");

  st_ = std::make_shared<State>();
  st_->batch_size = o_.batch_size;
  st_->image_shape = {o_.batch_size, out_shape_.numel()};
  st_->dtype = dtype_;
}

DataLoader::~DataLoader() { stop(); }

void DataLoader::set_progressive_resize(const ProgressiveResizeOptions& progressive) {
  progressive.check_fits(out_shape_.h, out_shape_.w, "data.progressive_resize");
  progressive_ = progressive;
}

ImageShape DataLoader::epoch_image_shape(int64_t epoch) const {
  if (!progressive_.enabled()) return out_shape_;
  const int64_t s = progressive_.size_at(epoch, out_shape_.w);
  return {s, s, out_shape_.c};
}

int64_t DataLoader::batches_per_epoch() const { return (per_rank_ + o_.batch_size - 1) / o_.batch_size; }

std::vector<int64_t> DataLoader::epoch_indices(int64_t epoch) const {
  const int64_t n = dataset_->size(), w = shard_.world_size;
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (o_.shuffle) {  // Fisher-Yates on a stream of (seed, epoch)
    SampleRng rng(mix64(mix64(o_.seed ^ 0x73687566666c65ull) + static_cast<uint64_t>(epoch)));
    for (int64_t i = n - 1; i > 0; --i) std::swap(order[i], order[rng.uniform_int(i + 1)]);
  }
  std::vector<int64_t> local(static_cast<size_t>(per_rank_));
  for (int64_t k = 0; k < per_rank_; ++k) local[k] = order[(shard_.rank + k * w) % n];  // wraps only when padding
  return local;
}

void DataLoader::cancel_locked(std::unique_lock<std::mutex>& lk) {
  State& st = *st_;
  ++st.generation;
  st.active = false;
  st.done_cv.notify_all();
  st.done_cv.wait(lk, [&] { return st.busy == 0; });
  st.drop_ready();
}

void DataLoader::start_epoch(int64_t epoch, int64_t first_batch) {
  KILN_CHECK(first_batch >= 0 && first_batch <= batches_per_epoch(), "DataLoader::start_epoch: batch ", first_batch,
             " is outside the epoch's ", batches_per_epoch(), " batches (", dataset_->name(), ")");
  std::vector<int64_t> indices = epoch_indices(epoch);
  State& st = *st_;
  {
    std::unique_lock<std::mutex> lk(st.mu);
    cancel_locked(lk);
    st.indices = std::move(indices);
    st.epoch = epoch;
    st.shape = epoch_image_shape(epoch);
    st.num_batches = batches_per_epoch();
    st.next_claim = st.next_deliver = first_batch;
    st.failed = false;
    st.error = nullptr;
    st.epoch_bad = 0;
    st.epoch_bad_names.clear();
    st.active = st.started = true;
    // The ring: `prefetch` batches in flight plus the one the consumer holds.
    const size_t want = o_.workers > 0 ? static_cast<size_t>(o_.prefetch) + 1 : 1;
    while (st.slots.size() < want) st.add_slot();
  }
  if (o_.workers > 0 && threads_.empty())
    for (int64_t i = 0; i < o_.workers; ++i) threads_.emplace_back([this] { worker_main(); });
  st.work_cv.notify_all();
}

bool DataLoader::fill(int64_t b, int slot, uint64_t generation, Pipeline::Workspace& ws, Sample& sample) {
  State& st = *st_;
  uint8_t* images;
  Tensor buffer, label_buffer;
  {
    std::lock_guard<std::mutex> lk(st.mu);  // `slots` may grow under another thread
    buffer = st.slots[slot].images;
    label_buffer = st.slots[slot].labels;
  }
  images = static_cast<uint8_t*>(buffer.raw_data());
  int64_t* labels = label_buffer.data<int64_t>();
  wait_host_copies(buffer);  // a GPU copy of the batch this slot held before may still read it
  wait_host_copies(label_buffer);
  const int64_t start = b * o_.batch_size, n = std::min(o_.batch_size, per_rank_ - start);
  const ImageShape shape = st.shape;  // the epoch's (progressive resizing), <= out_shape_
  const size_t sample_bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype_);
  const uint64_t epoch = static_cast<uint64_t>(st.epoch);
  for (int64_t i = 0; i < n; ++i) {
    if (st.generation.load(std::memory_order_relaxed) != generation) return false;
    const int64_t idx = st.indices[static_cast<size_t>(start + i)];
    try {
      const Loaded l = load(idx, epoch, sample);
      const SampleRng key = SampleRng::for_sample(o_.seed, epoch, static_cast<uint64_t>(l.index));
      if (l.region) pipeline_.augment_region(sample.image, l.box, key, ws);
      else pipeline_.augment(sample.image, key, ws);
      KILN_CHECK(sample.image.shape() == out_shape_, "the transforms gave a ", sample.image.shape().str(),
                 " image where the batch holds ", out_shape_.str(), "; end the transforms with a fixed-size crop");
      if (shape.h != out_shape_.h) {  // progressive resizing: the whole image, scaled
        resize_image(sample.image, CropBox{0, 0, out_shape_.h, out_shape_.w}, shape.h, shape.w,
                     progressive_.interpolation, ws.scratch);
        std::swap(sample.image, ws.scratch);
      }
      uint8_t* dst = images + static_cast<size_t>(i) * sample_bytes;
      if (dtype_ == DType::u8) std::memcpy(dst, sample.image.data(), sample_bytes);  // normalised by the consumer
      else pipeline_.write(sample.image, dst, dtype_);
      labels[i] = sample.label;
    } catch (const std::exception& e) {
      throw Error(detail::cat("DataLoader: sample ", idx, " of ", dataset_->name(), " (epoch ", epoch, ", batch ", b,
                              "): ", e.what()));
    }
  }
  return true;
}

DataLoader::Loaded DataLoader::load_one(int64_t j, uint64_t epoch, Sample& sample) {
  Loaded l;
  l.index = j;
  if (pipeline_.crops_first()) {
    const uint64_t key = SampleRng::sample_key(o_.seed, epoch, static_cast<uint64_t>(j));
    // With fast_decode the source may decode the box at a reduced scale that keeps the crop's size.
    const int64_t out = o_.fast_decode ? pipeline_.first_crop_size() : 0;
    l.region = dataset_->get_region_into(
        j, [&](int64_t h, int64_t w) { return RegionWant(pipeline_.first_box(h, w, key), out, out); }, sample, l.box);
  }
  if (!l.region) dataset_->get_into(j, sample);
  return l;
}

DataLoader::Loaded DataLoader::load(int64_t idx, uint64_t epoch, Sample& sample) {
  try {
    return load_one(idx, epoch, sample);
  } catch (const std::exception& e) {
    if (!o_.skip_bad_samples) throw;
    State& st = *st_;
    {
      std::lock_guard<std::mutex> lk(st.mu);
      ++st.epoch_bad;
      ++st.stats.skipped;
      if (st.stats.bad_samples.size() < LoaderStats::kMaxBadNames) st.stats.bad_samples.push_back(e.what());
      if (st.epoch_bad_names.size() < LoaderStats::kMaxBadNames) st.epoch_bad_names.push_back(e.what());
      KILN_CHECK(static_cast<double>(st.epoch_bad) <= o_.max_bad_fraction * static_cast<double>(per_rank_), st.epoch_bad,
                 " bad samples in this epoch, over data.max_bad_fraction = ", o_.max_bad_fraction, " of its ", per_rank_,
                 " samples (", dataset_->name(), shard_.world_size > 1 ? ", this rank's share" : "",
                 "); the latest: ", e.what());
    }
  }
  // The replacement: the next dataset index that loads (a pure function of idx, so any thread
  // count gives the same batch). Bad ones met here are counted when their own turn comes.
  const int64_t n = dataset_->size(), tries = std::min<int64_t>(n - 1, 100);
  for (int64_t k = 1; k <= tries; ++k) {
    const int64_t j = (idx + k) % n;
    try {
      return load_one(j, epoch, sample);
    } catch (const std::exception&) {
    }
  }
  KILN_FAIL("sample ", idx, " is bad and so are the ", tries, " after it (skip_bad_samples found no replacement)");
}

void DataLoader::worker_main() {
  State& st = *st_;
  Pipeline::Workspace ws;
  Sample sample;
  std::unique_lock<std::mutex> lk(st.mu);
  for (;;) {
    st.work_cv.wait(lk, [&] { return st.stopping || st.can_claim(o_.prefetch); });
    if (st.stopping) return;
    const int64_t b = st.next_claim++;
    const uint64_t gen = st.generation;
    ++st.busy;
    int slot = -1;
    std::exception_ptr err;
    try {
      slot = st.take_slot();
    } catch (...) {
      err = std::current_exception();
    }
    lk.unlock();
    bool complete = false;
    if (!err) {
      try {
        complete = fill(b, slot, gen, ws, sample);
      } catch (...) {
        err = std::current_exception();
      }
    }
    lk.lock();
    --st.busy;
    if (gen == st.generation && (complete || err)) {
      if (err && slot >= 0) {
        st.free_slots.push_back(slot);
        slot = -1;
      }
      st.ready.emplace(b, State::Ready{slot, err});
      if (err) st.failed = true;
    } else if (slot >= 0) {
      st.free_slots.push_back(slot);
    }
    st.done_cv.notify_all();
  }
}

bool DataLoader::next(Batch& out) {
  State& st = *st_;
  int64_t b = 0;
  int slot = -1;
  std::string report;
  {
    std::unique_lock<std::mutex> lk(st.mu);
    KILN_CHECK(st.started, "DataLoader::next: call start_epoch(epoch) first (", dataset_->name(), ")");
    if (st.error) std::rethrow_exception(st.error);
    if (st.next_deliver >= st.num_batches) return false;
    b = st.next_deliver;
    const auto t0 = std::chrono::steady_clock::now();
    const uint64_t gen = st.generation;
    if (o_.workers == 0) {
      slot = st.take_slot();
      lk.unlock();
      try {
        fill(b, slot, gen, sync_ws_, sync_sample_);
      } catch (...) {
        lk.lock();
        st.free_slots.push_back(slot);
        st.error = std::current_exception();
        throw;
      }
      lk.lock();
    } else {
      st.done_cv.wait(lk, [&] { return st.ready.count(b) > 0 || st.generation != gen; });
      KILN_CHECK(st.generation == gen, "DataLoader::next: the epoch was stopped while waiting for batch ", b, " (",
                 dataset_->name(), ")");
      State::Ready r = st.ready[b];
      st.ready.erase(b);
      if (r.error) {
        st.error = r.error;
        std::rethrow_exception(r.error);
      }
      slot = r.slot;
    }
    ++st.next_deliver;
    if (st.next_deliver == st.num_batches && st.epoch_bad > 0) {  // every sample of the epoch is loaded
      report = detail::cat(dataset_->name(), ": skipped ", st.epoch_bad, " bad sample(s) of ", per_rank_, " in epoch ",
                           st.epoch + 1,
                           shard_.world_size > 1 ? detail::cat(" on rank ", shard_.rank, " of ", shard_.world_size) : "",
                           " (data.skip_bad_samples; more than data.max_bad_fraction = ", o_.max_bad_fraction,
                           " of them fails the epoch)", st.epoch_bad > static_cast<int64_t>(st.epoch_bad_names.size()) ? "; the first:" : ":");
      for (const std::string& m : st.epoch_bad_names) report += "\n  " + m;
    }
    st.stats.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    st.stats.batches += 1;
    st.stats.samples += std::min(o_.batch_size, per_rank_ - b * o_.batch_size);
  }
  st.work_cv.notify_all();  // one more batch may be claimed
  make_batch(b, slot, out);
  if (!report.empty()) {
    if (reporter_) reporter_(report);
    else std::cerr << "kiln: warning: " << report << std::endl;
  }
  return true;
}

void DataLoader::set_reporter(Reporter r) { reporter_ = std::move(r); }

void DataLoader::make_batch(int64_t b, int slot, Batch& out) {
  State& st = *st_;
  void* images;
  int64_t* labels;
  {
    std::lock_guard<std::mutex> lk(st.mu);
    images = st.slots[slot].images.raw_data();
    labels = st.slots[slot].labels.data<int64_t>();
  }
  const int64_t start = b * o_.batch_size, n = std::min(o_.batch_size, per_rank_ - start);
  auto lease = std::make_shared<SlotLease>(st_, slot);
  // NOTE: assigning over `out` may release the previous batch's lease, which takes the lock:
  // this runs without it.
  const ImageShape shape = st.shape;  // set by start_epoch(), on this (the consumer's) thread
  out.images = wrap(images, {n, shape.h, shape.w, shape.c}, dtype_, lease);
  out.normalize = pipeline_.normalize().options();
  out.labels = wrap(labels, {n}, DType::i64, lease);
  out.indices.assign(st.indices.begin() + start, st.indices.begin() + start + n);
  out.padding = 0;
  for (int64_t k = start; k < start + n; ++k) out.padding += shard_.rank + k * shard_.world_size >= dataset_->size();
  out.epoch = st.epoch;
  out.index = b;
}

void DataLoader::stop() {
  State& st = *st_;
  {
    std::lock_guard<std::mutex> lk(st.mu);
    st.stopping = true;
    st.active = false;
    ++st.generation;
  }
  st.work_cv.notify_all();
  st.done_cv.notify_all();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  std::lock_guard<std::mutex> lk(st.mu);
  st.drop_ready();
  st.stopping = false;
  st.started = false;
}

LoaderStats DataLoader::stats() const {
  std::lock_guard<std::mutex> lk(st_->mu);
  return st_->stats;
}

void DataLoader::reset_stats() {
  std::lock_guard<std::mutex> lk(st_->mu);
  st_->stats = {};
}

}  // namespace kiln
