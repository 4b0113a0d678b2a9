// save_weights / load_weights (layers/interop.h): a model built in code round-trips through a
// safetensors file in kiln's layout and in PyTorch's (the conv weights as each layout stores them),
// and a file loaded as the other layout is refused with the layout to use, whether the file says
// which it is (its metadata) or only its shapes do (a file written by PyTorch or a kiln checkpoint).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <unistd.h>

#include "core/io/safetensors.h"
#include "core/rng.h"
#include "layers/conv.h"
#include "layers/interop.h"
#include "layers/linear.h"
#include "layers/norm.h"
#include "tests/expect_error.h"

using namespace kiln;
using kiln::testing::error_of;
namespace fs = std::filesystem;

namespace {
// A network written in code, as a user would: no to_json().
class CodeNet : public Module {
 public:
  explicit CodeNet(int64_t in_channels) : Module("CodeNet") {
    conv = register_module("conv", std::make_shared<Conv2d>(Conv2dOptions{.in_channels = in_channels, .out_channels = 4,
                                                                          .kernel_size = 3, .padding = 1}));
    bn = register_module("bn", std::make_shared<BatchNorm2d>(BatchNormOptions{.num_features = 4}));
    fc = register_module("fc", std::make_shared<Linear>(LinearOptions{.in_features = 4 * 5 * 5, .out_features = 3}));
  }
  Tensor forward(const Tensor& x) override { return (*fc)((*bn)((*conv)(x)).flatten()); }
  std::shared_ptr<Conv2d> conv;
  std::shared_ptr<BatchNorm2d> bn;
  std::shared_ptr<Linear> fc;
};

// A model with its own values: weights from `seed`, and running statistics moved by one training
// forward, so that a fresh model differs from it in every tensor.
std::shared_ptr<CodeNet> trained_net(int64_t in_channels, uint64_t seed) {
  manual_seed(seed);
  auto net = std::make_shared<CodeNet>(in_channels);
  (*net)(rand_normal({2, 5, 5, in_channels}, 0.5, 1.0));
  return net;
}

class WeightsFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_weights_file_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

void expect_equal_state(Module& a, Module& b) {
  StateDict sa = a.state_dict(), sb = b.state_dict();
  ASSERT_EQ(sa.size(), sb.size());
  for (auto& [name, t] : sa) EXPECT_EQ(t.to_double_vector(), sb.at(name).to_double_vector()) << name;
}
}  // namespace

TEST_F(WeightsFile, RoundTripInPytorchLayout) {
  auto saved = trained_net(1, 1);
  save_weights(*saved, path("w.safetensors"), WeightLayout::pytorch);
  // What PyTorch reads: the conv weight OIHW, the metadata naming the layout.
  SafetensorsContents c = load_safetensors(path("w.safetensors"));
  EXPECT_EQ(c.tensors.at("conv.weight").shape(), (Shape{4, 1, 3, 3}));
  EXPECT_EQ(c.tensors.at("fc.weight").shape(), (Shape{3, 100}));
  EXPECT_EQ(c.metadata.at("kiln.layout"), "pytorch");
  auto loaded = trained_net(1, 2);
  load_weights(*loaded, path("w.safetensors"), WeightLayout::pytorch);
  expect_equal_state(*saved, *loaded);
  Tensor x = rand_normal({3, 5, 5, 1}, 0.0, 1.0);
  saved->eval();
  loaded->eval();
  EXPECT_EQ((*saved)(x).to_float_vector(), (*loaded)(x).to_float_vector());
}

TEST_F(WeightsFile, RoundTripInKilnLayout) {
  auto saved = trained_net(1, 3);
  save_weights(*saved, path("w.safetensors"), WeightLayout::kiln);
  SafetensorsContents c = load_safetensors(path("w.safetensors"));
  EXPECT_EQ(c.tensors.at("conv.weight").shape(), (Shape{4, 3, 3, 1}));
  EXPECT_EQ(c.metadata.at("kiln.layout"), "kiln");
  auto loaded = trained_net(1, 4);
  load_weights(*loaded, path("w.safetensors"), WeightLayout::kiln);
  expect_equal_state(*saved, *loaded);
}

TEST_F(WeightsFile, TheOtherLayoutIsRefusedByItsMetadata) {
  // 3 input channels and a 3x3 kernel: OHWI and OIHW have the same shape, only the metadata tells.
  auto net = trained_net(3, 5);
  save_weights(*net, path("kiln.safetensors"), WeightLayout::kiln);
  save_weights(*net, path("torch.safetensors"), WeightLayout::pytorch);
  auto fresh = trained_net(3, 6);
  std::string msg = error_of([&] { load_weights(*fresh, path("kiln.safetensors"), WeightLayout::pytorch); });
  EXPECT_HAS(msg, path("kiln.safetensors"));
  EXPECT_HAS(msg, "kiln.layout = \"kiln\"");
  EXPECT_HAS(msg, "load it with WeightLayout::kiln");
  msg = error_of([&] { load_weights(*fresh, path("torch.safetensors"), WeightLayout::kiln); });
  EXPECT_HAS(msg, "load it with WeightLayout::pytorch");
  // Nothing was loaded by the refused calls.
  auto again = trained_net(3, 6);
  expect_equal_state(*fresh, *again);
}

TEST_F(WeightsFile, TheOtherLayoutIsRefusedByItsShapesWithoutMetadata) {
  // As PyTorch's safetensors.torch.save_file or a kiln checkpoint writes it: PyTorch's layout, no kiln.layout.
  auto net = trained_net(1, 7);
  save_safetensors(path("torch.safetensors"), export_pytorch_state_dict(*net));
  save_safetensors(path("kiln.safetensors"), net->state_dict());
  auto fresh = trained_net(1, 8);
  std::string msg = error_of([&] { load_weights(*fresh, path("torch.safetensors"), WeightLayout::kiln); });
  EXPECT_HAS(msg, "its conv.weight is [4, 1, 3, 3]");
  EXPECT_HAS(msg, "load it with WeightLayout::pytorch");
  msg = error_of([&] { load_weights(*fresh, path("kiln.safetensors"), WeightLayout::pytorch); });
  EXPECT_HAS(msg, "load it with WeightLayout::kiln");
  load_weights(*fresh, path("torch.safetensors"), WeightLayout::pytorch);
  expect_equal_state(*net, *fresh);
}

TEST_F(WeightsFile, AnotherModelIsNamedWithTheFile) {
  auto net = trained_net(1, 9);
  save_weights(*net, path("w.safetensors"), WeightLayout::pytorch);
  auto wider = trained_net(2, 9);  // conv.weight [4, 2, 3, 3] in PyTorch's layout
  const std::string msg = error_of([&] { load_weights(*wider, path("w.safetensors"), WeightLayout::pytorch); });
  EXPECT_HAS(msg, "load_weights '" + path("w.safetensors") + "'");
  EXPECT_HAS(msg, "conv.weight ([4, 1, 3, 3], expected [4, 2, 3, 3])");
  EXPECT_HAS(error_of([&] { load_weights(*net, path("missing.safetensors"), WeightLayout::kiln); }), "missing.safetensors");
}
