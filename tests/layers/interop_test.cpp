// PyTorch interop: conv weights OIHW <-> OHWI; a Linear after a Flatten is copied as is (the
// flatten gives PyTorch's (c, h, w) order); checked against a plain NCHW reference forward in double.
#include <gtest/gtest.h>

#include "core/rng.h"
#include "layers/interop.h"
#include "layers/registry.h"
#include "tests/gradcheck.h"

using namespace kiln;
using kiln::testing::expect_close;
using kiln::testing::randn;

namespace {
std::shared_ptr<Sequential> conv_flatten_linear() {
  // (N, 5, 4, 2) -> conv 3x3 pad 1 -> (N, 5, 4, 3) -> flatten 60 -> linear 4
  return build_sequential(json::parse(R"([
    {"type": "conv2d", "in_channels": 2, "out_channels": 3, "kernel_size": 3, "padding": 1},
    {"type": "flatten"},
    {"type": "linear", "in_features": 60, "out_features": 4}
  ])"), "layers");
}

// The same network in PyTorch's layouts: x NCHW, conv OIHW, flatten (c, h, w), in double.
std::vector<double> torch_reference(const StateDict& sd, const std::vector<double>& x_nchw, int64_t n) {
  const int C = 2, H = 5, W = 4, O = 3;
  auto w = sd.at("0.weight").to_double_vector(), b = sd.at("0.bias").to_double_vector();
  auto lw = sd.at("2.weight").to_double_vector(), lb = sd.at("2.bias").to_double_vector();
  std::vector<double> out;
  for (int64_t s = 0; s < n; ++s) {
    std::vector<double> feat(O * H * W);
    for (int o = 0; o < O; ++o)
      for (int h = 0; h < H; ++h)
        for (int x = 0; x < W; ++x) {
          double acc = b[o];
          for (int c = 0; c < C; ++c)
            for (int i = 0; i < 3; ++i)
              for (int j = 0; j < 3; ++j) {
                int hh = h + i - 1, xx = x + j - 1;
                if (hh < 0 || hh >= H || xx < 0 || xx >= W) continue;
                acc += w[((o * C + c) * 3 + i) * 3 + j] * x_nchw[((s * C + c) * H + hh) * W + xx];
              }
          feat[(o * H + h) * W + x] = acc;
        }
    for (int k = 0; k < 4; ++k) {
      double acc = lb[k];
      for (int f = 0; f < O * H * W; ++f) acc += lw[k * O * H * W + f] * feat[f];
      out.push_back(acc);
    }
  }
  return out;
}
}  // namespace

TEST(Interop, ExportLayoutsMatchPyTorch) {
  manual_seed(21);
  auto net = conv_flatten_linear();
  StateDict sd = export_pytorch_state_dict(*net);
  ASSERT_EQ(sd.size(), 4u);
  EXPECT_EQ(sd["0.weight"].shape(), (Shape{3, 2, 3, 3}));
  EXPECT_EQ(sd["2.weight"].shape(), (Shape{4, 60}));
  // conv: torch[o][c][i][j] == kiln[o][i][j][c]
  auto kw = net->state_dict()["0.weight"].to_double_vector(), tw = sd["0.weight"].to_double_vector();
  EXPECT_EQ(tw[((2 * 2 + 1) * 3 + 0) * 3 + 2], kw[((2 * 3 + 0) * 3 + 2) * 2 + 1]);
  // The exported weights computed the PyTorch way give kiln's outputs.
  Tensor x = randn({2, 5, 4, 2}, 22);
  Tensor y = net->forward(x);
  std::vector<double> x_nchw = x.permute({0, 3, 1, 2}).contiguous().to_double_vector();
  expect_close(y, torch_reference(sd, x_nchw, 2), 1e-4, 1e-4, "kiln vs PyTorch-layout reference");
}

TEST(Interop, ImportRoundTrips) {
  manual_seed(23);
  auto a = conv_flatten_linear();
  manual_seed(24);
  auto b = conv_flatten_linear();
  import_pytorch_state_dict(*b, export_pytorch_state_dict(*a));
  for (auto& [name, t] : a->state_dict()) EXPECT_EQ(t.to_double_vector(), b->state_dict()[name].to_double_vector()) << name;
  Tensor x = randn({1, 5, 4, 2}, 25);
  EXPECT_EQ(a->forward(x).to_double_vector(), b->forward(x).to_double_vector());
}

TEST(Interop, ImportErrorsUsePyTorchShapes) {
  auto net = conv_flatten_linear();
  StateDict sd = export_pytorch_state_dict(*net);
  sd["0.weight"] = Tensor::zeros({3, 3, 3, 2});  // kiln's layout given where PyTorch's is expected
  try {
    import_pytorch_state_dict(*net, sd);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("0.weight ([3, 3, 3, 2], expected [3, 2, 3, 3])"), std::string::npos)
        << e.what();
  }
  sd = export_pytorch_state_dict(*net);
  sd.erase("2.bias");
  EXPECT_THROW(import_pytorch_state_dict(*net, sd), Error);
  import_pytorch_state_dict(*net, sd, false);
}

TEST(Interop, FlattenFirstConvertsWithoutAForward) {
  // A flatten first: nothing about its input is known before a forward, and nothing needs to be.
  auto net = build_sequential(json::parse(R"([{"type": "flatten"}, {"type": "linear", "in_features": 12, "out_features": 2}])"),
                              "layers");
  StateDict sd = export_pytorch_state_dict(*net);
  EXPECT_EQ(sd["1.weight"].to_double_vector(), net->state_dict()["1.weight"].to_double_vector());
  // The PyTorch-layout weight applied to the NCHW input flattened as torch.flatten does gives kiln's output.
  Tensor x = randn({1, 2, 2, 3}, 26);
  auto tw = sd["1.weight"].to_double_vector(), tb = sd["1.bias"].to_double_vector();
  auto x_nchw = x.permute({0, 3, 1, 2}).contiguous().to_double_vector();
  std::vector<double> want;
  for (int o = 0; o < 2; ++o) {
    double acc = tb[o];
    for (int f = 0; f < 12; ++f) acc += tw[o * 12 + f] * x_nchw[f];
    want.push_back(acc);
  }
  expect_close(net->forward(x), want, 1e-5, 1e-5, "flatten + linear vs PyTorch-layout reference");
}
