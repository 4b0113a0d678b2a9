// safetensors: round trip of every dtype, the exact byte layout, each kind of corrupt file (an Error
// naming the file, never a crash), the atomic write, and a file written by PyTorch's safetensors.
#include "core/io/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

using namespace kiln;
namespace fs = std::filesystem;

namespace {

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_safetensors_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  static std::string read_bytes(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  static void write_bytes(const std::string& p, const std::string& bytes) {
    std::ofstream out(p, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  // A file with the given header text and data block, header length field = text size.
  std::string raw_file(const std::string& name, const std::string& header, const std::string& data) {
    uint64_t n = header.size();
    std::string bytes(8, '\0');
    std::memcpy(bytes.data(), &n, 8);
    write_bytes(path(name), bytes + header + data);
    return path(name);
  }
  // Asserts that loading `p` throws a kiln::Error whose message names the file and contains `what`.
  static void expect_load_error(const std::string& p, const std::string& what) {
    try {
      load_safetensors(p);
      ADD_FAILURE() << "no error for " << p << " (expected '" << what << "')";
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find(p), std::string::npos) << msg;
      EXPECT_NE(msg.find(what), std::string::npos) << "expected '" << what << "' in: " << msg;
    }
  }

  fs::path dir_;
};

std::map<std::string, Tensor> sample_tensors() {
  std::map<std::string, Tensor> m;
  m["w"] = Tensor::from_vector(std::vector<float>{1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 1e-30f}, {2, 3});
  m["h"] = Tensor::from_vector(std::vector<float>{0.5f, -65504.0f, 6.1035156e-05f}, {3}, DType::f16);
  m["b"] = Tensor::from_vector(std::vector<float>{1.0f, -3.0e38f, 0.0078125f}, {3, 1}, DType::bf16);
  m["i"] = Tensor::from_vector(std::vector<int64_t>{-7, 2147483647}, {2}, DType::i32);
  m["l"] = Tensor::from_vector(std::vector<int64_t>{-(int64_t(1) << 50), 3}, {1, 2}, DType::i64);
  m["u"] = Tensor::from_vector(std::vector<int64_t>{0, 1, 200, 255, 17}, {5}, DType::u8);
  m["d"] = Tensor::from_vector(std::vector<double>{3.141592653589793, -1e300}, {2});
  m["s"] = Tensor::scalar(42.0);
  m["e"] = Tensor::zeros({0, 3});
  return m;
}

void expect_same(const Tensor& a, const Tensor& b, const std::string& name) {
  ASSERT_EQ(a.dtype(), b.dtype()) << name;
  ASSERT_EQ(a.shape(), b.shape()) << name;
  Tensor ac = a.contiguous(), bc = b.contiguous();
  EXPECT_EQ(std::memcmp(ac.raw_data(), bc.raw_data(), ac.nbytes()), 0) << name;
}

}  // namespace

TEST_F(Safetensors, RoundTripEveryDtype) {
  auto tensors = sample_tensors();
  std::map<std::string, std::string> meta{{"format", "pt"}, {"epoch", "3"}};
  save_safetensors(path("a.safetensors"), tensors, meta);
  EXPECT_FALSE(fs::exists(path("a.safetensors.tmp")));
  SafetensorsContents c = load_safetensors(path("a.safetensors"));
  EXPECT_EQ(c.metadata, meta);
  ASSERT_EQ(c.tensors.size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    ASSERT_TRUE(c.tensors.count(name)) << name;
    expect_same(c.tensors.at(name), t, name);
    EXPECT_TRUE(c.tensors.at(name).device().is_cpu());
  }
}

TEST_F(Safetensors, NonContiguousInputIsPacked) {
  std::vector<float> v(24);
  for (int i = 0; i < 24; ++i) v[i] = static_cast<float>(i);
  Tensor t = Tensor::from_vector(v, {2, 3, 4}).permute({2, 0, 1});
  ASSERT_FALSE(t.is_contiguous());
  save_safetensors(path("p.safetensors"), {{"p", t}});
  Tensor r = load_safetensors(path("p.safetensors")).tensors.at("p");
  EXPECT_EQ(r.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(r.to_float_vector(), t.contiguous().to_float_vector());
}

TEST_F(Safetensors, ExactByteLayout) {
  save_safetensors(path("x.safetensors"), sample_tensors(), {{"k", "v"}});
  std::string bytes = read_bytes(path("x.safetensors"));
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);  // header padded: the data block starts 8-aligned
  std::string text = bytes.substr(8, n);
  EXPECT_EQ(text.front(), '{');
  auto h = nlohmann::json::parse(text);
  EXPECT_EQ(h["__metadata__"], (nlohmann::json{{"k", "v"}}));
  EXPECT_EQ(h["w"]["dtype"], "F32");
  EXPECT_EQ(h["h"]["dtype"], "F16");
  EXPECT_EQ(h["b"]["dtype"], "BF16");
  EXPECT_EQ(h["i"]["dtype"], "I32");
  EXPECT_EQ(h["l"]["dtype"], "I64");
  EXPECT_EQ(h["u"]["dtype"], "U8");
  EXPECT_EQ(h["d"]["dtype"], "F64");
  EXPECT_EQ(h["s"]["shape"], nlohmann::json::array());
  EXPECT_EQ(h["b"]["shape"], (nlohmann::json{3, 1}));
  // Each tensor aligned to its element size; the data block is exactly the tensors.
  uint64_t total = 0;
  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    uint64_t begin = it.value()["data_offsets"][0], end = it.value()["data_offsets"][1];
    DType dt = parse_safetensors_dtype(it.value()["dtype"]);
    EXPECT_EQ(begin % dtype_size(dt), 0u) << it.key();
    total += end - begin;
  }
  EXPECT_EQ(bytes.size(), 8 + n + total);
  // The f32 data is the little-endian bytes of the values.
  uint64_t wb = h["w"]["data_offsets"][0];
  float first;
  std::memcpy(&first, bytes.data() + 8 + n + wb, 4);
  EXPECT_EQ(first, 1.5f);
}

TEST_F(Safetensors, ReadsFileWrittenByPyTorch) {
  // tests/data/safetensors/torch_tiny.safetensors was written once with torch 1.13 and
  // safetensors 0.8 (`safetensors.torch.save_file`):
  //   {'conv.weight': f32 [[0.5, -1.25, 3.0], [1e-3, -0.0, 65504.0]], 'conv.bias': f16 [0.5, -2.0, 0.099975586],
  //    'bn.weight': bf16 [1.5, -0.0078125], 'labels': i64 [-3, 1 << 40], 'steps': i32 scalar 7,
  //    'pixels': u8 [[0, 127], [128, 255]], 'ref': f64 [pi], 'empty': f32 zeros(0, 4)},
  //   metadata={'format': 'pt', 'producer': 'torch 1.13 + safetensors 0.8'}
  auto c = load_safetensors(std::string(KILN_TEST_DATA) + "/safetensors/torch_tiny.safetensors");
  EXPECT_EQ(c.metadata.at("format"), "pt");
  EXPECT_EQ(c.metadata.at("producer"), "torch 1.13 + safetensors 0.8");
  EXPECT_EQ(c.tensors.size(), 8u);
  const Tensor& w = c.tensors.at("conv.weight");
  EXPECT_EQ(w.dtype(), DType::f32);
  EXPECT_EQ(w.shape(), (Shape{2, 3}));
  EXPECT_EQ(w.to_float_vector(), (std::vector<float>{0.5f, -1.25f, 3.0f, 1e-3f, -0.0f, 65504.0f}));
  EXPECT_TRUE(std::signbit(w.to_float_vector()[4]));
  const Tensor& b = c.tensors.at("conv.bias");
  EXPECT_EQ(b.dtype(), DType::f16);
  EXPECT_EQ(b.data_u16()[2], 0x2e66);  // 0.099975586 in half
  EXPECT_EQ(b.to_float_vector(), (std::vector<float>{0.5f, -2.0f, f16_to_float(0x2e66)}));
  const Tensor& bn = c.tensors.at("bn.weight");
  EXPECT_EQ(bn.dtype(), DType::bf16);
  EXPECT_EQ(bn.to_float_vector(), (std::vector<float>{1.5f, -0.0078125f}));
  EXPECT_EQ(c.tensors.at("labels").dtype(), DType::i64);
  EXPECT_EQ(c.tensors.at("labels").to_int_vector(), (std::vector<int64_t>{-3, int64_t(1) << 40}));
  const Tensor& steps = c.tensors.at("steps");
  EXPECT_EQ(steps.dtype(), DType::i32);
  EXPECT_EQ(steps.dim(), 0);
  EXPECT_EQ(steps.item(), 7.0);
  const Tensor& px = c.tensors.at("pixels");
  EXPECT_EQ(px.dtype(), DType::u8);
  EXPECT_EQ(px.shape(), (Shape{2, 2}));
  EXPECT_EQ(px.to_int_vector(), (std::vector<int64_t>{0, 127, 128, 255}));
  EXPECT_EQ(c.tensors.at("ref").dtype(), DType::f64);
  EXPECT_EQ(c.tensors.at("ref").to_double_vector(), (std::vector<double>{3.141592653589793}));
  EXPECT_EQ(c.tensors.at("empty").shape(), (Shape{0, 4}));
}

TEST_F(Safetensors, TruncatedFiles) {
  write_bytes(path("short"), std::string("\x10\x00\x00", 3));
  expect_load_error(path("short"), "truncated");
  write_bytes(path("zero"), "");
  expect_load_error(path("zero"), "truncated");
  // A valid file cut inside the data block: the last tensor is out of range.
  save_safetensors(path("full"), {{"a", Tensor::ones({4})}, {"b", Tensor::ones({8})}});
  std::string bytes = read_bytes(path("full"));
  write_bytes(path("cut"), bytes.substr(0, bytes.size() - 3));
  expect_load_error(path("cut"), "out of range");
  // Cut inside the header.
  write_bytes(path("cut_header"), bytes.substr(0, 20));
  expect_load_error(path("cut_header"), "exceeds");
}

TEST_F(Safetensors, BadHeaderLength) {
  std::string bytes(8, '\0');
  uint64_t huge = uint64_t(1) << 62;
  std::memcpy(bytes.data(), &huge, 8);
  write_bytes(path("huge"), bytes + "{}");
  expect_load_error(path("huge"), "larger than the limit");
  uint64_t n = 1000;
  std::memcpy(bytes.data(), &n, 8);
  write_bytes(path("long"), bytes + "{}");
  expect_load_error(path("long"), "header length 1000 exceeds");
  expect_load_error(raw_file("empty_header", "", ""), "does not start with '{'");
}

TEST_F(Safetensors, BadJson) {
  expect_load_error(raw_file("bad", R"({"a": {"dtype": "F32", )", ""), "not valid JSON");
  expect_load_error(raw_file("garbage", "{\xff\xfe}", ""), "not valid JSON");
  expect_load_error(raw_file("array", "[1, 2]", ""), "does not start with '{'");
  expect_load_error(raw_file("entry", R"({"a": 3})", ""), "tensor 'a' must be an object");
  expect_load_error(raw_file("missing", R"({"a": {"dtype": "F32", "shape": [1]}})", ""), "needs dtype, shape and data_offsets");
  expect_load_error(raw_file("extra", R"({"a": {"dtype": "F32", "shape": [], "data_offsets": [0, 4], "x": 1}})", "abcd"),
                    "unknown field 'x'");
  expect_load_error(raw_file("shape", R"({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", "abcd"),
                    "shape[0] must be a non-negative integer");
  expect_load_error(raw_file("shape_float", R"({"a": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", "abcd"),
                    "non-negative integer");
  expect_load_error(raw_file("shape_str", R"({"a": {"dtype": "F32", "shape": "1", "data_offsets": [0, 4]}})", "abcd"),
                    "shape that is not an array");
  expect_load_error(raw_file("offs", R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", "abcd"),
                    "data_offsets must be [begin, end]");
  expect_load_error(raw_file("meta", R"({"__metadata__": {"k": 1}})", ""), "__metadata__ entry 'k' must be a string");
  expect_load_error(raw_file("meta_obj", R"({"__metadata__": [1]})", ""), "__metadata__ must be an object");
  // A shape whose byte size overflows 64 bits.
  expect_load_error(
      raw_file("overflow", R"({"a": {"dtype": "F64", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})", ""),
      "shape too large");
}

TEST_F(Safetensors, UnknownDtype) {
  expect_load_error(raw_file("bool", R"({"a": {"dtype": "BOOL", "shape": [1], "data_offsets": [0, 1]}})", "x"),
                    "unsupported dtype 'BOOL'; kiln reads F32, F16, BF16, I32, I64, U8, F64");
  expect_load_error(raw_file("num", R"({"a": {"dtype": 3, "shape": [1], "data_offsets": [0, 1]}})", "x"),
                    "non-string dtype");
}

TEST_F(Safetensors, OffsetsOutOfRangeOverlappingOrWithHoles) {
  expect_load_error(raw_file("range", R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", "abcd"),
                    "out of range");
  expect_load_error(raw_file("reversed", R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})", "abcdefgh"),
                    "end before begin");
  expect_load_error(raw_file("size", R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", "abcd"),
                    "needs 8 bytes");
  expect_load_error(
      raw_file("overlap",
               R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
               "abcdefgh"),
      "overlap");
  expect_load_error(raw_file("hole", R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", "abcdefgh"),
                    "belong to no tensor");
  expect_load_error(raw_file("trailing", R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", "abcdefgh"),
                    "trailing bytes");
  expect_load_error(raw_file("negative", R"({"a": {"dtype": "U8", "shape": [1], "data_offsets": [-1, 0]}})", "a"),
                    "non-negative integer");
  // Two empty tensors at the same offset do not overlap.
  auto c = load_safetensors(raw_file(
      "empties",
      R"({"a": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}, "b": {"dtype": "U8", "shape": [0, 2], "data_offsets": [0, 0]}, "c": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}})",
      "z"));
  EXPECT_EQ(c.tensors.size(), 3u);
  EXPECT_EQ(c.tensors.at("c").to_int_vector(), (std::vector<int64_t>{'z'}));
}

TEST_F(Safetensors, MissingFile) { expect_load_error(path("nope.safetensors"), "cannot open"); }

TEST_F(Safetensors, CorruptBytesNeverCrash) {
  save_safetensors(path("ok"), sample_tensors(), {{"format", "pt"}});
  std::string good = read_bytes(path("ok"));
  // Every truncation length, and random single-byte changes: either a clean load or a kiln::Error.
  int errors = 0, loads = 0;
  for (size_t len = 0; len < good.size(); ++len) {
    write_bytes(path("t"), good.substr(0, len));
    try {
      load_safetensors(path("t"));
      ++loads;
    } catch (const Error&) {
      ++errors;
    }
  }
  EXPECT_EQ(loads, 0);  // a strict prefix of a valid file is never valid
  std::mt19937 rng(123);
  for (int trial = 0; trial < 400; ++trial) {
    std::string b = good;
    size_t pos = rng() % b.size();
    b[pos] = static_cast<char>(rng() % 256);
    write_bytes(path("f"), b);
    try {
      load_safetensors(path("f"));
      ++loads;
    } catch (const Error&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 0);
}

TEST_F(Safetensors, AtomicWriteReplacesAndReportsErrors) {
  save_safetensors(path("m.safetensors"), {{"x", Tensor::ones({2})}});
  save_safetensors(path("m.safetensors"), {{"y", Tensor::zeros({3})}});
  auto c = load_safetensors(path("m.safetensors"));
  EXPECT_EQ(c.tensors.size(), 1u);
  EXPECT_TRUE(c.tensors.count("y"));
  EXPECT_FALSE(fs::exists(path("m.safetensors.tmp")));
  try {
    save_safetensors(path("no_such_dir/m.safetensors"), {{"x", Tensor::ones({2})}});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_dir/m.safetensors.tmp"), std::string::npos) << e.what();
  }
  EXPECT_THROW(save_safetensors(path("r"), {{"__metadata__", Tensor::ones({1})}}), Error);
  EXPECT_THROW(save_safetensors(path("u"), {{"x", Tensor()}}), Error);
  save_safetensors(path("empty"), {});
  EXPECT_TRUE(load_safetensors(path("empty")).tensors.empty());
}
