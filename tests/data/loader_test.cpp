// DataLoader: identical batches for 0, 1 and 4 workers; shuffle is a permutation per epoch;
// sharding covers every sample once; drop_last; values equal the pipeline applied by hand;
// early stop and restart; batches outliving the loader; worker errors reach the consumer.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include "core/check.h"
#include "data/loader.h"
#include "data/synthetic.h"
#include "data_test_util.h"

using namespace kiln;
namespace kt = kiln::testing;

namespace {

using kiln::testing::augmenting_pipeline;
using kiln::testing::small_synthetic;

LoaderOptions opts(int64_t batch, int64_t workers, bool shuffle = true, bool drop_last = false) {
  LoaderOptions o;
  o.batch_size = batch;
  o.workers = workers;
  o.shuffle = shuffle;
  o.drop_last = drop_last;
  o.prefetch = 3;
  o.seed = 9;
  return o;
}

struct Copied {  // a batch's contents, copied out
  std::vector<float> images;
  std::vector<int64_t> labels, indices;
  int64_t padding;
  bool operator==(const Copied&) const = default;
};

std::vector<Copied> run_epoch(DataLoader& l, int64_t epoch) {
  std::vector<Copied> out;
  l.start_epoch(epoch);
  Batch b;
  while (l.next(b)) {
    EXPECT_EQ(b.index, static_cast<int64_t>(out.size()));
    EXPECT_EQ(b.epoch, epoch);
    out.push_back({b.images.to_float_vector(), b.labels.to_int_vector(), b.indices, b.padding});
  }
  return out;
}

// A dataset that fails on one index (as a damaged file would) and can be slowed down.
class FlakyDataset : public Dataset {
 public:
  FlakyDataset(int64_t n, int64_t bad, int sleep_us = 0) : inner_(small_synthetic(n)), bad_(bad), sleep_us_(sleep_us) {}
  int64_t size() const override { return inner_->size(); }
  int64_t num_classes() const override { return inner_->num_classes(); }
  ImageShape image_shape() const override { return inner_->image_shape(); }
  std::string name() const override { return "flaky"; }
  void get_into(int64_t index, Sample& out) const override {
    if (sleep_us_) std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
    KILN_CHECK(index != bad_, "cannot decode /data/images/", index, ".jpg: bad Huffman table");
    inner_->get_into(index, out);
  }

 private:
  std::shared_ptr<SyntheticDataset> inner_;
  int64_t bad_;
  int sleep_us_;
};

}  // namespace

TEST(DataLoader, SameBatchesForAnyWorkerCount) {
  auto ds = small_synthetic(103);
  std::vector<std::vector<Copied>> runs;
  for (int64_t workers : {0, 1, 4}) {
    DataLoader l(ds, augmenting_pipeline(), opts(8, workers));
    EXPECT_EQ(l.batches_per_epoch(), 13);
    EXPECT_EQ(l.image_shape(), (ImageShape{5, 5, 3}));
    auto e0 = run_epoch(l, 0), e1 = run_epoch(l, 1);
    ASSERT_EQ(e0.size(), 13u);
    EXPECT_EQ(e0.back().labels.size(), 103u - 12 * 8);
    EXPECT_NE(e0.front().indices, e1.front().indices);  // a new order each epoch
    e0.insert(e0.end(), e1.begin(), e1.end());
    runs.push_back(std::move(e0));
  }
  EXPECT_TRUE(runs[0] == runs[1]);
  EXPECT_TRUE(runs[0] == runs[2]);
  // prefetch and a fresh loader change nothing either.
  LoaderOptions o = opts(8, 2);
  o.prefetch = 1;
  DataLoader l(ds, augmenting_pipeline(), o);
  run_epoch(l, 5);
  auto e0 = run_epoch(l, 0);
  EXPECT_TRUE(std::equal(e0.begin(), e0.end(), runs[0].begin()));
}

// A resumed run starts its epoch at the batch it was interrupted at: batches k.. are those of the
// whole epoch (same samples, same augmentation), for any worker count; past the end is refused.
TEST(DataLoader, StartingMidEpochDeliversTheRestOfTheSameEpoch) {
  auto ds = small_synthetic(103);
  DataLoader whole(ds, augmenting_pipeline(), opts(8, 2));
  const std::vector<Copied> all = run_epoch(whole, 4);
  for (int64_t workers : {0, 3}) {
    DataLoader l(ds, augmenting_pipeline(), opts(8, workers));
    for (int64_t k : {int64_t{5}, int64_t{12}, int64_t{13}}) {
      l.start_epoch(4, k);
      Batch b;
      int64_t n = 0;
      while (l.next(b)) {
        EXPECT_EQ(b.index, k + n);
        ASSERT_LT(static_cast<size_t>(k + n), all.size());
        EXPECT_TRUE((Copied{b.images.to_float_vector(), b.labels.to_int_vector(), b.indices, b.padding}) ==
                    all[static_cast<size_t>(k + n)]);
        ++n;
      }
      EXPECT_EQ(n, 13 - k) << "workers " << workers << ", start " << k;
    }
    EXPECT_THROW(l.start_epoch(4, 14), Error);
    EXPECT_THROW(l.start_epoch(4, -1), Error);
  }
}

TEST(DataLoader, BatchValuesArePipelineOfDatasetSamples) {
  auto ds = small_synthetic(20);
  Pipeline p = augmenting_pipeline();
  for (const char* dtype : {"f32", "bf16"}) {
    LoaderOptions o = opts(6, 2);
    o.dtype = dtype;
    DataLoader l(ds, p, o);
    EXPECT_EQ(l.dtype(), std::string(dtype) == "bf16" ? DType::bf16 : DType::f32);
    l.start_epoch(4);
    Batch b;
    Pipeline::Workspace ws;
    while (l.next(b)) {
      ASSERT_EQ(b.images.shape(), (Shape{b.size(), 5, 5, 3}));
      ASSERT_EQ(b.images.dtype(), l.dtype());
      ASSERT_EQ(b.labels.shape(), (Shape{b.size()}));
      ASSERT_EQ(b.labels.dtype(), DType::i64);
      auto images = b.images.to_float_vector();
      auto labels = b.labels.to_int_vector();
      for (int64_t i = 0; i < b.size(); ++i) {
        Sample s = ds->get(b.indices[i]);
        EXPECT_EQ(labels[i], s.label);
        p.augment(s.image, SampleRng::sample_key(9, 4, static_cast<uint64_t>(b.indices[i])), ws);
        std::vector<float> expect(75);
        p.write(s.image, expect.data(), DType::f32);
        for (int64_t k = 0; k < 75; ++k) {
          float want = std::string(dtype) == "bf16" ? bf16_to_float(float_to_bf16(expect[k])) : expect[k];
          ASSERT_EQ(images[i * 75 + k], want) << dtype << " sample " << b.indices[i] << " element " << k;
        }
      }
    }
  }
}

TEST(DataLoader, ShuffleIsAPermutationPerEpoch) {
  auto ds = small_synthetic(1000);
  DataLoader l(ds, Pipeline(), opts(64, 2));
  std::set<std::vector<int64_t>> orders;
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::vector<int64_t> seen;
    for (const Copied& b : run_epoch(l, epoch)) seen.insert(seen.end(), b.indices.begin(), b.indices.end());
    EXPECT_EQ(seen, l.epoch_indices(epoch));
    orders.insert(seen);
    std::sort(seen.begin(), seen.end());
    for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(seen[i], i);  // each sample exactly once
  }
  EXPECT_EQ(orders.size(), 3u);
  EXPECT_EQ(l.epoch_indices(1), l.epoch_indices(1));
  DataLoader plain(ds, Pipeline(), opts(64, 2, /*shuffle=*/false));
  auto in_order = plain.epoch_indices(3);
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(in_order[i], i);
}

TEST(DataLoader, ShardingCoversEverySampleOnce) {
  auto ds = small_synthetic(103);
  for (int64_t world : {1, 2, 3, 4}) {
    std::vector<int64_t> count(103, 0);
    int64_t batches = -1, padding = 0;
    for (int64_t rank = 0; rank < world; ++rank) {
      DataLoader l(ds, Pipeline(), opts(10, 2), Shard{rank, world});
      auto epoch = run_epoch(l, 2);
      if (batches < 0) batches = static_cast<int64_t>(epoch.size());
      EXPECT_EQ(static_cast<int64_t>(epoch.size()), batches) << "every rank runs as many batches";
      EXPECT_EQ(l.samples_per_epoch(), (103 + world - 1) / world);
      for (size_t bi = 0; bi < epoch.size(); ++bi) {
        const Copied& b = epoch[bi];
        if (b.padding) {
          EXPECT_EQ(bi + 1, epoch.size()) << "padding only in the last batch";
        }
        padding += b.padding;
        // Padding samples are at the end of the batch; the others count once.
        for (size_t i = 0; i + b.padding < b.indices.size(); ++i) ++count[b.indices[i]];
      }
    }
    for (int64_t i = 0; i < 103; ++i) EXPECT_EQ(count[i], 1) << "sample " << i << " world " << world;
    EXPECT_EQ(padding, (world - 103 % world) % world);
  }
  // drop_last: the remainder of the sharding and the partial batches go; ranks stay disjoint.
  std::set<int64_t> seen;
  for (int64_t rank = 0; rank < 3; ++rank) {
    DataLoader l(ds, Pipeline(), opts(10, 1, true, true), Shard{rank, 3});
    EXPECT_EQ(l.samples_per_epoch(), 30);  // 103 / 3 = 34 -> 3 batches of 10
    for (const Copied& b : run_epoch(l, 0)) {
      EXPECT_EQ(b.indices.size(), 10u);
      EXPECT_EQ(b.padding, 0);
      for (int64_t i : b.indices) EXPECT_TRUE(seen.insert(i).second) << "sample " << i << " on two ranks";
    }
  }
  EXPECT_EQ(seen.size(), 90u);
  EXPECT_THROW(DataLoader(ds, Pipeline(), opts(10, 1), Shard{3, 3}), Error);
  EXPECT_THROW(DataLoader(ds, Pipeline(), opts(40, 1, true, true), Shard{0, 3}), Error);  // 34 < 40
}

TEST(DataLoader, DropLast) {
  auto ds = small_synthetic(103);
  DataLoader keep(ds, Pipeline(), opts(10, 2, false, false));
  DataLoader drop(ds, Pipeline(), opts(10, 2, false, true));
  EXPECT_EQ(keep.batches_per_epoch(), 11);
  EXPECT_EQ(drop.batches_per_epoch(), 10);
  auto k = run_epoch(keep, 0), d = run_epoch(drop, 0);
  ASSERT_EQ(k.size(), 11u);
  ASSERT_EQ(d.size(), 10u);
  EXPECT_EQ(k.back().indices, (std::vector<int64_t>{100, 101, 102}));
  for (const Copied& b : d) EXPECT_EQ(b.indices.size(), 10u);
  EXPECT_EQ(d.back().indices.back(), 99);
}

TEST(DataLoader, EarlyStopRestartAndHeldBatches) {
  auto ds = std::make_shared<FlakyDataset>(400, -1, 200);  // slow: workers are mid-batch when we stop
  auto reference = [&] {
    DataLoader l(ds, augmenting_pipeline(), opts(16, 0));
    return run_epoch(l, 1);
  }();
  {
    DataLoader l(ds, augmenting_pipeline(), opts(16, 4));
    l.start_epoch(0);
    Batch b;
    ASSERT_TRUE(l.next(b));
    l.stop();  // joins with batches in flight and one held by us
    EXPECT_EQ(b.images.shape()[0], 16);
    EXPECT_THROW(l.next(b), Error);  // stopped: start_epoch first
    // Restart on another epoch mid-way through, then run it to the end.
    auto epoch1 = run_epoch(l, 1);
    EXPECT_TRUE(epoch1 == reference);
    l.start_epoch(2);
    ASSERT_TRUE(l.next(b));
    l.start_epoch(1);  // abandons epoch 2 mid-way
    EXPECT_TRUE(run_epoch(l, 1) == reference);
    l.start_epoch(3);
    ASSERT_TRUE(l.next(b));
  }  // destructor mid-epoch, while `b` is still held
  // A batch outlives its loader: its buffer stays valid until released.
  Batch kept;
  std::vector<float> first;
  {
    DataLoader l(ds, augmenting_pipeline(), opts(16, 2));
    l.start_epoch(1);
    ASSERT_TRUE(l.next(kept));
    first = kept.images.to_float_vector();
  }
  EXPECT_EQ(first, reference[0].images);
  EXPECT_EQ(kept.images.to_float_vector(), first);
}

TEST(DataLoader, HoldingManyBatchesDoesNotStall) {
  auto ds = small_synthetic(300);
  DataLoader l(ds, Pipeline(), opts(10, 3));  // prefetch 3
  l.start_epoch(0);
  std::vector<Batch> all;  // more batches held than the ring has slots
  Batch b;
  while (l.next(b)) all.push_back(b);
  ASSERT_EQ(all.size(), 30u);
  std::set<const void*> buffers;
  for (const Batch& x : all) buffers.insert(x.images.raw_data());
  EXPECT_EQ(buffers.size(), 30u) << "held batches never share a buffer";
  auto reference = run_epoch(l, 0);
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i].images.to_float_vector(), reference[i].images);
  auto st = l.stats();
  EXPECT_EQ(st.batches, 60);
  EXPECT_EQ(st.samples, 600);
  EXPECT_GE(st.wait_seconds, 0.0);
  l.reset_stats();
  EXPECT_EQ(l.stats().batches, 0);
}

TEST(DataLoader, WorkerErrorReachesConsumer) {
  for (int64_t workers : {0, 1, 4}) {
    auto ds = std::make_shared<FlakyDataset>(100, 37);
    DataLoader l(ds, Pipeline(), opts(8, workers, /*shuffle=*/false));
    l.start_epoch(0);
    Batch b;
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(l.next(b)) << "batches before the bad one arrive";
    std::string msg = kt::error_of([&] { l.next(b); });
    EXPECT_HAS(msg, "DataLoader: sample 37 of flaky (epoch 0, batch 4): cannot decode /data/images/37.jpg: bad Huffman table");
    EXPECT_THROW(l.next(b), Error);  // the epoch stays failed
    // A new epoch that avoids the bad sample runs (sample 37 is always in batch 4 without shuffle: stop before).
    l.start_epoch(1);
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(l.next(b));
  }
}

TEST(DataLoader, VaryingImageSizes) {
  // Images of different sizes (decoded JPEGs): a crop to a fixed size makes them batchable.
  class Varying : public Dataset {
   public:
    int64_t size() const override { return 12; }
    int64_t num_classes() const override { return 2; }
    ImageShape image_shape() const override { return {0, 0, 1}; }
    std::string name() const override { return "varying"; }
    void get_into(int64_t index, Sample& out) const override {
      out.image.resize(4 + index, 6 + index % 3, 1);
      std::fill(out.image.data(), out.image.data() + out.image.numel(), static_cast<uint8_t>(index));
      out.label = index % 2;
    }
  };
  auto ds = std::make_shared<Varying>();
  std::string msg = kt::error_of([&] { DataLoader(ds, Pipeline(), opts(4, 1)); });
  EXPECT_HAS(msg, "DataLoader for varying: the transforms give images of varying size (?x?x1)");
  DataLoader l(ds, Pipeline::from_json(Json::parse(R"([{"type": "random_crop", "size": 4}])")), opts(4, 2));
  auto epoch = run_epoch(l, 0);
  ASSERT_EQ(epoch.size(), 3u);
  for (const Copied& b : epoch)
    for (size_t i = 0; i < b.indices.size(); ++i)
      for (size_t k = 0; k < 16; ++k) ASSERT_FLOAT_EQ(b.images[i * 16 + k], b.indices[i] / 255.0f);
}

TEST(DataLoader, OptionsJson) {
  LoaderOptions d;
  EXPECT_EQ(d.batch_size, 64);
  EXPECT_TRUE(d.shuffle);
  EXPECT_FALSE(d.drop_last);
  EXPECT_EQ(d.workers, 2);
  EXPECT_EQ(d.prefetch, 0);  // "auto"
  EXPECT_EQ(d.prefetch_depth(), 4);  // workers + 2
  EXPECT_TRUE(d.fast_decode);
  EXPECT_EQ(d.dtype, "f32");
  auto o = LoaderOptions::from_json(Json{{"batch_size", 32}, {"dtype", "bf16"}, {"workers", 0}});
  EXPECT_EQ(o.batch_size, 32);
  EXPECT_EQ(o.workers, 0);
  EXPECT_EQ(LoaderOptions::from_json(o.to_json()).to_json(), o.to_json());
  EXPECT_THROW(LoaderOptions::from_json(Json{{"batch_size", 0}}), Error);
  EXPECT_THROW(LoaderOptions::from_json(Json{{"dtype", "f16"}}), Error);
  EXPECT_THROW(LoaderOptions::from_json(Json{{"prefetch", -2}}), Error);
  EXPECT_THROW(LoaderOptions::from_json(Json{{"shuffle", 1}}), Error);
}
