// The convolution algorithm chooser (core/cpu/conv_algo.cpp): the fastest of injected timings is
// kept (no timed tests), choices are cached per process and on disk and round-trip, damaged or
// foreign cache files are ignored with a warning, processes of two thread counts share one file (and
// a format-1 file still reads), forced and heuristic modes are honoured, and
// conv2d's results under each choice are within that algorithm's tolerance of the direct ones.
#include "core/cpu/conv_algo.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/autograd.h"
#include "core/cpu/winograd.h"
#include "core/dnnl_context.h"
#include "core/ops/conv2d.h"
#include "tests/gradcheck.h"

using namespace kiln;
using kiln::testing::expect_close;
using kiln::testing::randn;
namespace ca = kiln::ops::conv_algo;
namespace fs = std::filesystem;

namespace {

// The file's "machine" (format 2): machine_id() without its thread count.
std::string file_machine() {
  std::string m = ca::machine_id();
  const size_t t = m.find(" threads; "), start = m.rfind("; ", t);
  return m.substr(0, start) + "; " + m.substr(t + 10);
}

// Isolates each test: its own cache file, the automatic mode, no fake timer, warnings collected.
class ConvAlgo : public ::testing::Test {
 protected:
  void SetUp() override {
    prev_mode_ = ca::mode();
    prev_path_ = ca::cache_path();
    dir_ = fs::path(::testing::TempDir()) /
           ("kiln_conv_algo_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "conv_algo.json").string();
    ca::set_cache_path(path_);
    ca::set_mode(ca::Mode::automatic);
    ca::reset();
    ca::set_warning_sink([this](const std::string& m) { warnings_.push_back(m); });
  }
  void TearDown() override {
    ca::set_timer(nullptr);
    ca::set_warning_sink(nullptr);
    ca::set_mode(prev_mode_);
    ca::reset();
    ca::set_cache_path(prev_path_);
    fs::remove_all(dir_);
  }
  // A timer that reports `ms[algo]` and counts its calls; candidates never run.
  void fake(std::map<ca::Algo, double> ms) {
    ca::set_timer([this, ms](const ca::Candidate& c, double) {
      ++timed_;
      return ms.at(c.algo);
    });
  }
  static std::vector<ca::Candidate> both() {
    return {{ca::Algo::direct, [] { FAIL() << "a fake-timed candidate ran"; }},
            {ca::Algo::winograd, [] { FAIL() << "a fake-timed candidate ran"; }}};
  }
  static ca::ConvKey key(int64_t c = 64) {
    ca::ConvKey k;
    k.n = 8, k.h = k.w = 16, k.c = k.k = c, k.kh = k.kw = 3, k.pad_h = k.pad_w = 1;
    k.dtype = DType::bf16;
    return k;
  }
  void write(const std::string& text) { std::ofstream(path_) << text; }

  ca::Mode prev_mode_;
  std::string prev_path_, path_;
  fs::path dir_;
  std::vector<std::string> warnings_;
  std::atomic<int> timed_{0};
};

TEST_F(ConvAlgo, PicksTheFasterOfTwoCandidatesAndCachesIt) {
  fake({{ca::Algo::direct, 2.0}, {ca::Algo::winograd, 1.0}});
  EXPECT_EQ(ca::choose(key(), ca::Pass::forward, both(), ca::Algo::direct), ca::Algo::winograd);
  EXPECT_EQ(timed_, 2);
  // The second call is answered by the process cache, even if the timings would now differ.
  fake({{ca::Algo::direct, 1.0}, {ca::Algo::winograd, 2.0}});
  EXPECT_EQ(ca::choose(key(), ca::Pass::forward, both(), ca::Algo::direct), ca::Algo::winograd);
  EXPECT_EQ(timed_, 2);
  // Another pass of the same shape is measured on its own.
  EXPECT_EQ(ca::choose(key(), ca::Pass::backward_data, both(), ca::Algo::direct), ca::Algo::direct);
  EXPECT_EQ(timed_, 4);
  auto es = ca::entries();
  ASSERT_EQ(es.size(), 2u);
  EXPECT_EQ(es[0].key, key().str());
  EXPECT_EQ(es[0].pass, ca::Pass::forward);
  ASSERT_EQ(es[0].choice.times.size(), 2u);
  EXPECT_EQ(es[0].choice.times[1].ms, 1.0);
  EXPECT_EQ(ca::stats().measured, 2);
}

TEST_F(ConvAlgo, FastestKeepsDirectWithinTheMargin) {
  EXPECT_EQ(ca::fastest({{ca::Algo::direct, 1.0}, {ca::Algo::winograd, 0.99}}), ca::Algo::direct);
  EXPECT_EQ(ca::fastest({{ca::Algo::direct, 1.0}, {ca::Algo::winograd, 0.9}}), ca::Algo::winograd);
  EXPECT_EQ(ca::fastest({{ca::Algo::direct, 1.0}, {ca::Algo::winograd, 0.9}, {ca::Algo::im2col, 0.5}}),
            ca::Algo::im2col);
  EXPECT_EQ(ca::fastest({{ca::Algo::direct, 1.0}, {ca::Algo::winograd, 2.0}}), ca::Algo::direct);
}

TEST_F(ConvAlgo, SmallConvolutionsAndSingleCandidatesAreNotMeasured) {
  fake({{ca::Algo::direct, 2.0}, {ca::Algo::winograd, 1.0}});
  ca::ConvKey small = key(4);
  ASSERT_LT(small.flops(), ca::kMinMeasureFlops);
  EXPECT_EQ(ca::choose(small, ca::Pass::forward, both(), ca::Algo::direct), ca::Algo::direct);  // the rule's
  EXPECT_EQ(ca::choose(key(), ca::Pass::forward, {{ca::Algo::direct, [] {}}}, ca::Algo::direct), ca::Algo::direct);
  EXPECT_EQ(timed_, 0);
}

TEST_F(ConvAlgo, ForcedAndHeuristicModesAreHonoured) {
  fake({{ca::Algo::direct, 2.0}, {ca::Algo::winograd, 1.0}});
  ca::set_mode(ca::Mode::direct);
  EXPECT_EQ(ca::choose(key(), ca::Pass::forward, both(), ca::Algo::direct), ca::Algo::direct);
  ca::set_mode(ca::Mode::winograd);
  EXPECT_EQ(ca::choose(key(), ca::Pass::forward, both(), ca::Algo::winograd), ca::Algo::winograd);
  // A forced algorithm that is no candidate falls back to direct.
  EXPECT_EQ(ca::choose(key(), ca::Pass::forward, {{ca::Algo::direct, [] {}}}, ca::Algo::winograd), ca::Algo::direct);
  ca::set_mode(ca::Mode::heuristic);
  fake({{ca::Algo::direct, 1.0}, {ca::Algo::winograd, 2.0}});
  EXPECT_EQ(ca::choose(key(), ca::Pass::forward, both(), ca::Algo::winograd), ca::Algo::winograd);
  EXPECT_EQ(timed_, 0);
  EXPECT_TRUE(ca::entries().empty());
  // The forced modes reach core/cpu/winograd.h's rule too.
  ca::set_mode(ca::Mode::direct);
  EXPECT_FALSE(ops::winograd::chosen(512, 512, DType::bf16));
  ca::set_mode(ca::Mode::winograd);
  EXPECT_TRUE(ops::winograd::chosen(3, 3, DType::f32));
}

TEST_F(ConvAlgo, ModeNamesParseAndBadOnesAreRejected) {
  EXPECT_EQ(ca::parse_mode("auto", "KILN_CONV_ALGO"), ca::Mode::automatic);
  EXPECT_EQ(ca::parse_mode("", "KILN_CONV_ALGO"), ca::Mode::automatic);
  EXPECT_EQ(ca::parse_mode("heuristic", "KILN_CONV_ALGO"), ca::Mode::heuristic);
  EXPECT_EQ(ca::parse_mode("direct", "KILN_CONV_ALGO"), ca::Mode::direct);
  EXPECT_EQ(ca::parse_mode("winograd", "KILN_CONV_ALGO"), ca::Mode::winograd);
  try {
    ca::parse_mode("fastest", "KILN_CONV_ALGO");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("KILN_CONV_ALGO=fastest"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("heuristic"), std::string::npos) << e.what();
  }
}

TEST_F(ConvAlgo, ApplicableCandidates) {
  using V = std::vector<ca::Algo>;
  ca::ConvKey k = key();
  const V all{ca::Algo::direct, ca::Algo::winograd, ca::Algo::im2col}, gemm{ca::Algo::direct, ca::Algo::im2col};
  EXPECT_EQ(ca::applicable(k, ca::Pass::forward), all);
  EXPECT_EQ(ca::applicable(k, ca::Pass::backward_data), all);
  EXPECT_EQ(ca::applicable(k, ca::Pass::backward_weights), all);
  k.stride_h = k.stride_w = 2;
  EXPECT_EQ(ca::applicable(k, ca::Pass::forward), gemm);
  EXPECT_EQ(ca::applicable(k, ca::Pass::backward_data), gemm);
  EXPECT_EQ(ca::applicable(k, ca::Pass::backward_weights), gemm);
  k.bias = true;  // im2col's forward and weight gradient leave the bias to the direct kernels
  EXPECT_EQ(ca::applicable(k, ca::Pass::forward), V{ca::Algo::direct});
  EXPECT_EQ(ca::applicable(k, ca::Pass::backward_data), gemm);
  EXPECT_EQ(ca::applicable(k, ca::Pass::backward_weights), V{ca::Algo::direct});
  k = key();
  k.kh = k.kw = 1, k.pad_h = k.pad_w = 0;  // already a GEMM in oneDNN
  for (ca::Pass pass : {ca::Pass::forward, ca::Pass::backward_data, ca::Pass::backward_weights})
    EXPECT_EQ(ca::applicable(k, pass), V{ca::Algo::direct});
  k = key();
  k.kh = k.kw = 7, k.stride_h = k.stride_w = 2, k.pad_h = k.pad_w = 3;  // ResNet's stem: the general im2col only
  EXPECT_EQ(ca::applicable(k, ca::Pass::forward), gemm);
  EXPECT_EQ(ca::applicable(k, ca::Pass::backward_weights), V{ca::Algo::direct});
  k = key();
  k.groups = 2;
  EXPECT_EQ(ca::applicable(k, ca::Pass::backward_data), V{ca::Algo::direct});
  k = key();
  k.dtype = DType::f16;
  EXPECT_EQ(ca::applicable(k, ca::Pass::forward), V{ca::Algo::direct});
  // blocked: input and output channels both 16 or both 8 (NHWC is then oneDNN's nChw16c / nChw8c),
  // any kernel, stride and bias; one group.
  const V all_blocked{ca::Algo::direct, ca::Algo::winograd, ca::Algo::im2col, ca::Algo::blocked};
  for (int64_t c : {16, 8}) {
    k = key(c);
    for (ca::Pass pass : {ca::Pass::forward, ca::Pass::backward_data, ca::Pass::backward_weights})
      EXPECT_EQ(ca::applicable(k, pass), all_blocked) << c;
    k.kh = k.kw = 1, k.pad_h = k.pad_w = 0, k.bias = true;
    EXPECT_EQ(ca::applicable(k, ca::Pass::forward), (V{ca::Algo::direct, ca::Algo::blocked})) << c;
  }
  for (auto [c, kk] : std::vector<std::pair<int64_t, int64_t>>{{16, 32}, {32, 16}, {32, 32}, {8, 16}, {1, 16}}) {
    k = key(c);
    k.k = kk;
    EXPECT_EQ(ca::applicable(k, ca::Pass::forward), all) << c << "->" << kk;
  }
  k = key(16);
  k.groups = 2;
  EXPECT_EQ(ca::applicable(k, ca::Pass::forward), V{ca::Algo::direct});
}

// Candidates left out (bench train's auto-im2col) are neither offered nor answered from the full
// set's choices, and their own choices are kept apart.
TEST_F(ConvAlgo, ExcludedCandidatesAreLeftOutAndCachedApart) {
  struct Restore {
    ~Restore() { ca::set_excluded({}); }
  } restore;
  using V = std::vector<ca::Algo>;
  const ca::ConvKey k = key();
  ca::set_excluded({ca::Algo::im2col, ca::Algo::direct});  // direct cannot be left out
  EXPECT_EQ(ca::excluded(), V{ca::Algo::im2col});
  EXPECT_EQ(ca::applicable(k, ca::Pass::backward_weights), (V{ca::Algo::direct, ca::Algo::winograd}));
  ca::set_excluded({});
  fake({{ca::Algo::direct, 2.0}, {ca::Algo::winograd, 1.0}});
  EXPECT_EQ(ca::choose(k, ca::Pass::forward, both(), ca::Algo::direct), ca::Algo::winograd);
  ca::set_excluded({ca::Algo::winograd});
  // Without winograd only direct is left: no measuring, and not the full set's winograd.
  EXPECT_EQ(ca::choose(k, ca::Pass::forward, {{ca::Algo::direct, {}}}, ca::Algo::direct), ca::Algo::direct);
  ca::set_excluded({ca::Algo::im2col});
  fake({{ca::Algo::direct, 1.0}, {ca::Algo::winograd, 2.0}});
  EXPECT_EQ(ca::choose(k, ca::Pass::forward, both(), ca::Algo::direct), ca::Algo::direct);  // measured apart
  ca::set_excluded({});
  EXPECT_EQ(ca::choose(k, ca::Pass::forward, both(), ca::Algo::direct), ca::Algo::winograd);  // the first answer
  std::vector<std::string> keys;
  for (const auto& e : ca::entries()) keys.push_back(e.key);
  EXPECT_EQ(keys, (std::vector<std::string>{k.str(), k.str() + " -im2col"}));
}

TEST_F(ConvAlgo, TheDiskCacheRoundTrips) {
  fake({{ca::Algo::direct, 2.0}, {ca::Algo::winograd, 1.0}});
  ASSERT_EQ(ca::choose(key(), ca::Pass::forward, both(), ca::Algo::direct), ca::Algo::winograd);
  fake({{ca::Algo::direct, 1.0}, {ca::Algo::winograd, 3.0}});
  ASSERT_EQ(ca::choose(key(), ca::Pass::backward_weights, both(), ca::Algo::direct), ca::Algo::direct);
  ASSERT_TRUE(fs::exists(path_));
  // A new "process": the answers come from the file, nothing is timed.
  ca::reset();
  timed_ = 0;
  fake({{ca::Algo::direct, 1.0}, {ca::Algo::winograd, 9.0}});
  EXPECT_EQ(ca::choose(key(), ca::Pass::forward, both(), ca::Algo::direct), ca::Algo::winograd);
  EXPECT_EQ(ca::choose(key(), ca::Pass::backward_weights, both(), ca::Algo::direct), ca::Algo::direct);
  EXPECT_EQ(timed_, 0);
  EXPECT_EQ(ca::stats().from_disk, 2);
  EXPECT_EQ(ca::stats().measured, 0);
  auto es = ca::entries();
  ASSERT_EQ(es.size(), 2u);
  EXPECT_TRUE(es[0].choice.from_disk);
  ASSERT_EQ(es[0].choice.times.size(), 2u);
  EXPECT_EQ(es[0].choice.times[0].ms, 2.0);
  // A measurement of a new shape is merged into the file, the old entries stay.
  ASSERT_EQ(ca::choose(key(128), ca::Pass::forward, both(), ca::Algo::direct), ca::Algo::direct);
  ca::reset();
  EXPECT_TRUE(ca::load_cache());
  EXPECT_EQ(ca::entries().size(), 3u);
  EXPECT_TRUE(warnings_.empty());
}

TEST_F(ConvAlgo, CacheOffMeasuresEveryProcess) {
  ca::set_cache_path("");
  fake({{ca::Algo::direct, 2.0}, {ca::Algo::winograd, 1.0}});
  EXPECT_EQ(ca::choose(key(), ca::Pass::forward, both(), ca::Algo::direct), ca::Algo::winograd);
  ca::reset();
  EXPECT_EQ(ca::choose(key(), ca::Pass::forward, both(), ca::Algo::direct), ca::Algo::winograd);
  EXPECT_EQ(timed_, 4);
  EXPECT_FALSE(fs::exists(path_));
}

// Each damaged or foreign file: one warning, the file's answer not used, measured instead, and the
// file replaced by a good one.
TEST_F(ConvAlgo, DamagedOrForeignCacheFilesAreIgnoredWithAWarning) {
  const std::string machine = ca::machine_id();
  auto entry = [&](const std::string& algo) {
    return std::string(R"({"kiln_conv_algo": 1, "machine": )") + nlohmann::json(machine).dump() +
           R"(, "entries": [{"key": ")" + key().str() + R"(", "pass": "forward", "algo": ")" + algo +
           R"(", "ms": {"direct": 1, "winograd": 2}}]})";
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"truncated", entry("winograd").substr(0, 40)},
      {"binary", std::string("\x00\xff\x13garbage", 10)},
      {"not a cache", R"({"hello": [1, 2]})"},
      {"foreign machine", R"({"kiln_conv_algo": 1, "machine": "some other cpu; 96 threads; oneDNN 3.4.0", "entries": [{"key": ")" +
                              key().str() + R"(", "pass": "forward", "algo": "winograd", "ms": {}}]})"},
      {"unknown algorithm", entry("fft")},
      {"wrong types", R"({"kiln_conv_algo": 1, "machine": )" + nlohmann::json(machine).dump() +
                          R"(, "entries": [{"key": 7, "pass": "forward", "algo": "direct"}]})"},
      {"future format", R"({"kiln_conv_algo": 3, "machine": "x", "entries": []})"},
      {"format 2 entry without threads", R"({"kiln_conv_algo": 2, "machine": )" + nlohmann::json(file_machine()).dump() +
                                             R"(, "entries": [{"key": "k", "pass": "forward", "algo": "direct"}]})"},
  };
  for (const auto& [what, text] : cases) {
    SCOPED_TRACE(what);
    ca::reset();
    warnings_.clear();
    timed_ = 0;
    write(text);
    fake({{ca::Algo::direct, 1.0}, {ca::Algo::winograd, 2.0}});
    EXPECT_EQ(ca::choose(key(), ca::Pass::forward, both(), ca::Algo::direct), ca::Algo::direct);
    EXPECT_EQ(timed_, 2);
    ASSERT_EQ(warnings_.size(), 1u);
    EXPECT_NE(warnings_[0].find(path_), std::string::npos) << warnings_[0];
    ca::reset();
    warnings_.clear();
    EXPECT_TRUE(ca::load_cache());  // rewritten as a good file
    EXPECT_TRUE(warnings_.empty());
  }
  // A trusted file whose entry names an algorithm that cannot run the shape: measured again.
  ca::reset();
  timed_ = 0;
  write(entry("im2col"));
  EXPECT_EQ(ca::choose(key(), ca::Pass::forward, both(), ca::Algo::direct), ca::Algo::direct);
  EXPECT_EQ(timed_, 2);
}

// Processes of different thread counts share the file: each reads its own entries, measures only what
// it lacks, without a warning, and every writer keeps the others' entries.
TEST_F(ConvAlgo, ThreadCountsShareOneFile) {
  const int prev = omp_get_max_threads();
  omp_set_num_threads(1);
  fake({{ca::Algo::direct, 2.0}, {ca::Algo::winograd, 1.0}});
  ASSERT_EQ(ca::choose(key(), ca::Pass::forward, both(), ca::Algo::direct), ca::Algo::winograd);
  // A "process" of 2 threads: measures for itself.
  ca::reset();
  omp_set_num_threads(2);
  timed_ = 0;
  fake({{ca::Algo::direct, 1.0}, {ca::Algo::winograd, 2.0}});
  EXPECT_EQ(ca::choose(key(), ca::Pass::forward, both(), ca::Algo::direct), ca::Algo::direct);
  EXPECT_EQ(timed_, 2);
  EXPECT_EQ(ca::stats().from_disk, 0);
  // Meanwhile a third writer (1 thread) adds a shape: the 2-thread process's next save keeps it.
  {
    nlohmann::json j = nlohmann::json::parse(std::ifstream(path_));
    j["entries"].push_back({{"key", key(32).str()}, {"pass", "forward"}, {"threads", 1}, {"algo", "winograd"},
                            {"ms", {{"direct", 3.0}, {"winograd", 1.0}}}});
    std::ofstream(path_) << j.dump();
  }
  ASSERT_EQ(ca::choose(key(128), ca::Pass::forward, both(), ca::Algo::direct), ca::Algo::direct);
  // Back to 1 thread, then to 2: every answer from the file, nothing timed.
  for (int threads : {1, 2}) {
    SCOPED_TRACE(threads);
    ca::reset();
    omp_set_num_threads(threads);
    timed_ = 0;
    fake({{ca::Algo::direct, 5.0}, {ca::Algo::winograd, 5.0}});
    EXPECT_EQ(ca::choose(key(), ca::Pass::forward, both(), ca::Algo::direct),
              threads == 1 ? ca::Algo::winograd : ca::Algo::direct);
    if (threads == 1) EXPECT_EQ(ca::choose(key(32), ca::Pass::forward, both(), ca::Algo::direct), ca::Algo::winograd);
    if (threads == 2) EXPECT_EQ(ca::choose(key(128), ca::Pass::forward, both(), ca::Algo::direct), ca::Algo::direct);
    EXPECT_EQ(timed_, 0);
  }
  omp_set_num_threads(prev);
  nlohmann::json j = nlohmann::json::parse(std::ifstream(path_));
  EXPECT_EQ(j["kiln_conv_algo"], 2);
  EXPECT_EQ(j["machine"], file_machine());
  std::multiset<std::pair<std::string, int>> got;
  for (const auto& e : j["entries"]) got.insert({e["key"].get<std::string>(), e["threads"].get<int>()});
  EXPECT_EQ(got, (std::multiset<std::pair<std::string, int>>{{key().str(), 1}, {key().str(), 2}, {key(32).str(), 1},
                                                             {key(128).str(), 2}}));
  EXPECT_TRUE(warnings_.empty()) << warnings_[0];
}

// A file of format 1 (the thread count in "machine") is read for that thread count and rewritten as
// format 2 with its entries; another thread count's format-1 file is kept too, without a warning.
TEST_F(ConvAlgo, AFormat1FileStillReads) {
  const int prev = omp_get_max_threads();
  for (int threads : {1, 2}) {
    SCOPED_TRACE(threads);
    omp_set_num_threads(1);
    const std::string old_machine = ca::machine_id();  // "CPU; 1 threads; oneDNN ..."
    ASSERT_NE(old_machine.find("; 1 threads; "), std::string::npos) << old_machine;
    write(R"({"kiln_conv_algo": 1, "machine": )" + nlohmann::json(old_machine).dump() + R"(, "entries": [{"key": ")" +
          key().str() + R"(", "pass": "forward", "algo": "winograd", "ms": {"direct": 2, "winograd": 1}}]})");
    omp_set_num_threads(threads);
    ca::reset();
    timed_ = 0;
    fake({{ca::Algo::direct, 1.0}, {ca::Algo::winograd, 9.0}});
    EXPECT_EQ(ca::choose(key(), ca::Pass::forward, both(), ca::Algo::direct),
              threads == 1 ? ca::Algo::winograd : ca::Algo::direct);
    EXPECT_EQ(timed_, threads == 1 ? 0 : 2);
    ASSERT_EQ(ca::choose(key(128), ca::Pass::forward, both(), ca::Algo::direct), ca::Algo::direct);
    nlohmann::json j = nlohmann::json::parse(std::ifstream(path_));
    EXPECT_EQ(j["kiln_conv_algo"], 2);
    std::multiset<std::pair<std::string, int>> got;
    for (const auto& e : j["entries"]) got.insert({e["key"].get<std::string>(), e["threads"].get<int>()});
    std::multiset<std::pair<std::string, int>> want{{key().str(), 1}, {key(128).str(), threads}};
    if (threads == 2) want.insert({key().str(), 2});
    EXPECT_EQ(got, want);
    EXPECT_TRUE(warnings_.empty()) << warnings_[0];
  }
  omp_set_num_threads(prev);
}

TEST_F(ConvAlgo, ThreadsAgreeOnOneAnswer) {
  // Each thread's timer prefers another algorithm; whoever stores first wins for all.
  std::atomic<int> calls{0};
  ca::set_timer([&](const ca::Candidate& c, double) {
    int n = calls++;
    return (n / 2) % 2 == (c.algo == ca::Algo::direct ? 0 : 1) ? 1.0 : 2.0;
  });
  std::vector<ca::Algo> got(8);
  std::vector<std::thread> ts;
  for (int i = 0; i < 8; ++i)
    ts.emplace_back([&, i] { got[i] = ca::choose(key(), ca::Pass::forward, both(), ca::Algo::direct); });
  for (auto& t : ts) t.join();
  for (ca::Algo a : got) EXPECT_EQ(a, got[0]);
  EXPECT_EQ(ca::entries().size(), 1u);
}

// conv2d under each choice: a fake timer makes `winner` the fastest wherever it is a candidate;
// the three passes must then be within that algorithm's tolerance of the direct ones, and equal
// to the algorithm's own kernel (the choice was honoured).
struct Case {
  const char* name;
  int64_t stride;
  DType dtype;
};

TEST_F(ConvAlgo, Conv2dResultsUnderEveryChoiceMatchDirect) {
  // Without native bf16 (AVX2) a bf16 convolution computes in f32 on its converted operands, with
  // the same candidates as f32, and rounds the result.
  const bool native = onednn::native_compute(DType::bf16);
  for (const Case& cs : {Case{"s1 f32", 1, DType::f32}, Case{"s1 bf16", 1, DType::bf16}, Case{"s2 f32", 2, DType::f32},
                         Case{"s2 bf16", 2, DType::bf16}}) {
    ops::Conv2dParams p;
    p.stride_h = p.stride_w = cs.stride;
    p.pad_h = p.pad_w = 1;
    const int64_t n = 8, hw = 24, c = 40, k = 48, o = (hw - 1) / cs.stride + 1;
    Tensor x = randn({n, hw, hw, c}, 1).to(cs.dtype), w = randn({k, 3, 3, c}, 2, DType::f32, 0.1).to(cs.dtype);
    Tensor gy = randn({n, o, o, k}, 3).to(cs.dtype);
    // The algorithm's own kernel as conv2d runs it: in the compute dtype, rounded to the operands'.
    const DType ct = native ? cs.dtype : DType::f32;
    const Tensor xk = x.to(ct), wk = w.to(ct), gyk = gy.to(ct);
    auto own = [&](const Tensor& t) { return t.to(cs.dtype).to_double_vector(); };
    auto run = [&] {
      Tensor xr = x.clone(), wr = w.clone();
      xr.set_requires_grad(true);
      wr.set_requires_grad(true);
      Tensor y = ops::conv2d(xr, wr, Tensor(), p);
      y.backward(gy);
      return std::vector<Tensor>{y, xr.grad(), wr.grad()};
    };
    ca::set_mode(ca::Mode::direct);
    std::vector<Tensor> ref = run();
    ca::set_mode(ca::Mode::automatic);
    for (ca::Algo winner : {ca::Algo::direct, ca::Algo::winograd, ca::Algo::im2col}) {
      SCOPED_TRACE(std::string(cs.name) + ", " + ca::algo_name(winner) + " fastest");
      ca::reset();
      ca::set_cache_path("");
      ca::set_timer([&](const ca::Candidate& cand, double) { return cand.algo == winner ? 1.0 : 5.0; });
      std::vector<Tensor> got = run();
      std::map<ca::Pass, ca::Algo> chose;
      for (const auto& e : ca::entries()) chose[e.pass] = e.choice.algo;
      // Tolerances relative to the reference's rms: bf16 Winograd rounds its transformed tiles
      // (max error about 2.5% of the rms against an exact convolution, direct bf16 about 1.5%,
      // tests/core/winograd_test.cpp); f32 differs by summation order only.
      const double rel = cs.dtype == DType::f32 ? 1e-4 : 0.06;
      const char* what[] = {"y", "dx", "dw"};
      for (int i = 0; i < 3; ++i) {
        std::vector<double> r = ref[i].to_double_vector();
        double ss = 0;
        for (double v : r) ss += v * v;
        expect_close(got[i], r, rel * std::sqrt(ss / static_cast<double>(r.size())), 0.0, what[i]);
      }
      // Every pass has a second candidate: each is measured and takes the winner where it applies
      // (Winograd: stride 1 only).
      ASSERT_EQ(ca::entries().size(), 3u);
      const ca::Algo fw = cs.stride == 1 || winner != ca::Algo::winograd ? winner : ca::Algo::direct;
      EXPECT_EQ(chose[ca::Pass::forward], fw);
      EXPECT_EQ(chose[ca::Pass::backward_data], fw);
      EXPECT_EQ(chose[ca::Pass::backward_weights], fw);
      if (fw == ca::Algo::winograd) {
        EXPECT_EQ(got[0].to_double_vector(), own(ops::winograd::forward(xk, wk)));
        EXPECT_EQ(got[1].to_double_vector(), own(ops::winograd::backward_data(gyk, wk)));
      }
      if (fw == ca::Algo::im2col) {
        EXPECT_EQ(got[0].to_double_vector(), own(ops::winograd::im2col_forward(xk, wk, cs.stride, cs.stride, 1, 1)));
        EXPECT_EQ(got[1].to_double_vector(),
                  own(ops::winograd::im2col_backward_data(gyk, wk, x.shape(), cs.stride, cs.stride, 1, 1)));
      }
      const ca::Algo bw = chose[ca::Pass::backward_weights];
      if (bw == ca::Algo::winograd) {
        EXPECT_EQ(got[2].to_double_vector(), own(ops::winograd::backward_weights(gyk, xk)));
      }
      if (bw == ca::Algo::im2col) {
        EXPECT_EQ(got[2].to_double_vector(), own(ops::winograd::im2col_backward_weights(gyk, xk, cs.stride, 1)));
      }
      if (bw == ca::Algo::direct) {
        EXPECT_EQ(got[2].to_double_vector(), ref[2].to_double_vector());
      }
    }
  }
}

// conv_algo's `blocked` (oneDNN's blocked kernels on the NHWC bytes of 16- or 8-channel tensors):
// where it is offered and chosen, the three passes and the bias gradient agree with direct to
// summation order, and a second run with the stored choice gives the same bits. On an AVX-512 CPU
// the 16-channel view has optimised kernels, so it must be offered there.
TEST_F(ConvAlgo, BlockedViewMatchesDirect) {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto avx512_core = static_cast<unsigned>(dnnl::cpu_isa::avx512_core);  // a bit mask, as bf16_units()
  const bool avx512 = (isa & avx512_core) == avx512_core;
  int offered16 = 0;
  for (int64_t c : {16, 8})
    for (int64_t stride : {1, 2})
      for (bool bias : {false, true}) {
        SCOPED_TRACE(std::to_string(c) + " channels, stride " + std::to_string(stride) + (bias ? ", bias" : ""));
        ops::Conv2dParams p;
        p.stride_h = p.stride_w = stride;
        p.pad_h = p.pad_w = 1;
        // Large enough to be measured (kMinMeasureFlops) at stride 1.
        const int64_t n = 8, hw = c == 16 ? 24 : 48, o = (hw - 1) / stride + 1;
        Tensor x = randn({n, hw, hw, c}, 1), w = randn({c, 3, 3, c}, 2, DType::f32, 0.1);
        Tensor b = bias ? randn({c}, 4) : Tensor(), gy = randn({n, o, o, c}, 3);
        auto run = [&] {
          Tensor xr = x.clone(), wr = w.clone(), br = bias ? b.clone() : Tensor();
          xr.set_requires_grad(true);
          wr.set_requires_grad(true);
          if (bias) br.set_requires_grad(true);
          Tensor y = ops::conv2d(xr, wr, br, p);
          y.backward(gy);
          std::vector<Tensor> out{y, xr.grad(), wr.grad()};
          if (bias) out.push_back(br.grad());
          return out;
        };
        ca::set_mode(ca::Mode::direct);
        const std::vector<Tensor> ref = run();
        ca::set_mode(ca::Mode::automatic);
        ca::reset();
        ca::set_cache_path("");
        ca::set_timer([](const ca::Candidate& cand, double) { return cand.algo == ca::Algo::blocked ? 1.0 : 5.0; });
        const std::vector<Tensor> got = run(), again = run();
        std::map<ca::Pass, ca::Algo> chose;
        for (const auto& e : ca::entries()) chose[e.pass] = e.choice.algo;
        if (stride == 1 && c == 16) {
          const bool fwd = chose[ca::Pass::forward] == ca::Algo::blocked;
          offered16 += fwd;
          if (avx512) EXPECT_TRUE(fwd) << "the 16-channel blocked view was not offered on an AVX-512 CPU";
        }
        const char* what[] = {"y", "dx", "dw", "db"};
        for (size_t i = 0; i < ref.size(); ++i) {
          std::vector<double> r = ref[i].to_double_vector();
          double ss = 0;
          for (double v : r) ss += v * v;
          expect_close(got[i], r, 1e-4 * std::sqrt(ss / static_cast<double>(r.size())), 0.0, what[i]);
          EXPECT_EQ(again[i].to_double_vector(), got[i].to_double_vector()) << what[i];
        }
      }
  if (avx512) EXPECT_GT(offered16, 0);
}

}  // namespace

namespace {

TEST_F(ConvAlgo, ReportOnceSaysWhatTheMeasuringCost) {
  // Called before anything was measured: nothing to say, and the one report is still to come.
  EXPECT_EQ(ca::report_once(), "");
  fake({{ca::Algo::direct, 2.0}, {ca::Algo::winograd, 1.0}});
  ca::choose(key(), ca::Pass::forward, both(), ca::Algo::direct);
  const std::string r = ca::report_once();
  EXPECT_EQ(r.rfind("conv_algo: 1 (shape, pass) pairs measured in ", 0), 0u) << r;
  EXPECT_NE(r.find(path_), std::string::npos) << r;
  EXPECT_EQ(ca::report_once(), "");  // once per process
}

}  // namespace
