// The layer registry: every type builds from JSON and round-trips through to_json; config errors
// name the JSON path, suggest the closest type or key, and say what is accepted.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/autograd.h"
#include "core/ops/silu.h"
#include "layers/linear.h"
#include "layers/registry.h"
#include "tests/gradcheck.h"
#include "tests/layers/error_util.h"

using namespace kiln;
using kiln::testing::error_of;
using kiln::testing::expect_has;

TEST(Registry, EveryTypeBuildsAndRoundTrips) {
  json layers = json::parse(R"([
    {"type": "conv2d", "in_channels": 3, "out_channels": 8, "kernel_size": 3, "padding": 1, "bias": false},
    {"type": "batch_norm2d", "num_features": 8, "momentum": 0.05},
    {"type": "relu"},
    {"type": "silu"},
    {"type": "local_response_norm", "size": 5},
    {"type": "max_pool2d", "kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": true},
    {"type": "basic_block", "in_channels": 8, "planes": 16, "stride": 2, "shortcut": "A"},
    {"type": "bottleneck", "in_channels": 16, "planes": 4},
    {"type": "avg_pool2d", "kernel_size": 2, "count_include_pad": false},
    {"type": "adaptive_avg_pool2d", "output_size": 2},
    {"type": "sequential", "layers": [{"type": "relu"}, {"type": "dropout", "p": 0.1}]},
    {"type": "flatten"},
    {"type": "dropout", "p": 0.25},
    {"type": "linear", "in_features": 64, "out_features": 10, "init": "normal"},
    {"type": "batch_norm1d", "num_features": 10},
    {"type": "global_avg_pool"}
  ])");
  std::vector<std::string> seen;
  for (size_t i = 0; i < layers.size(); ++i) {
    auto m = build_layer(layers[i], "layers[" + std::to_string(i) + "]");
    seen.push_back(m->type());
    json j = m->to_json();
    for (auto& [k, v] : layers[i].items()) {
      if (k == "layers") continue;
      EXPECT_EQ(j.at(k), v) << "layers[" << i << "]." << k;
    }
    auto again = build_layer(j, "again");
    EXPECT_EQ(again->to_json(), j);
    EXPECT_EQ(again->num_parameters(), m->num_parameters());
  }
  auto types = layer_types();
  std::sort(seen.begin(), seen.end());
  std::sort(types.begin(), types.end());
  EXPECT_EQ(seen, types) << "every registered type is tested";
}

TEST(Registry, DefaultsAreDocumented) {
  json j = build_layer(json::parse(R"({"type": "conv2d", "in_channels": 1, "out_channels": 2, "kernel_size": 5})"),
                       "x")->to_json();
  EXPECT_EQ(j, json::parse(R"({"type": "conv2d", "in_channels": 1, "out_channels": 2, "kernel_size": 5, "stride": 1,
      "padding": 0, "dilation": 1, "groups": 1, "bias": true, "init": "default"})"));
  j = build_layer(json::parse(R"({"type": "max_pool2d", "kernel_size": 2})"), "x")->to_json();
  EXPECT_EQ(j["stride"], 0);  // 0 = kernel_size
  EXPECT_EQ(build_layer(json::parse(R"({"type": "dropout"})"), "x")->to_json()["p"], 0.5);
}

TEST(Registry, UnknownTypeSuggestsClosest) {
  std::string m = error_of([] { build_layer(json::parse(R"({"type": "conv"})"), "model.layers[0]"); });
  expect_has(m, "model.layers[0].type = \"conv\" is not a layer type");
  expect_has(m, "did you mean \"conv2d\"?");
  expect_has(m, "accepted: conv2d, linear");
  m = error_of([] { build_layer(json::parse(R"({"type": "batchnorm2d", "num_features": 3})"), "l"); });
  expect_has(m, "did you mean \"batch_norm2d\"?");
  m = error_of([] { build_layer(json::parse(R"({"kernel_size": 3})"), "model.layers[4]"); });
  expect_has(m, "model.layers[4].type is required");
  m = error_of([] { build_layer(json::parse(R"([1, 2])"), "model.layers[1]"); });
  expect_has(m, "model.layers[1] must be an object");
}

TEST(Registry, BadOptionsNameTheirPath) {
  std::string m = error_of([] {
    build_layer(json::parse(R"({"type": "conv2d", "in_channels": 3, "out_channels": 4, "kernal_size": 3})"),
                "model.layers[2]");
  });
  expect_has(m, "model.layers[2].kernel_size is required");
  m = error_of([] {
    build_layer(json::parse(R"({"type": "conv2d", "in_channels": 3, "out_channels": 4, "kernel_size": 3,
                                "strid": 2})"), "model.layers[2]");
  });
  expect_has(m, "unknown key model.layers[2].strid (did you mean model.layers[2].stride?)");
  m = error_of([] {
    build_layer(json::parse(R"({"type": "conv2d", "in_channels": 3, "out_channels": 4, "kernel_size": 3,
                                "stride": "2"})"), "model.layers[2]");
  });
  expect_has(m, "model.layers[2].stride must be an integer, not a string");
  m = error_of([] {
    build_layer(json::parse(R"({"type": "sequential", "layers": [{"type": "relu"}, {"type": "dropout", "p": 2}]})"),
                "model.layers[5]");
  });
  expect_has(m, "model.layers[5].layers[1].p = 2 is out of range");
  m = error_of([] {
    build_layer(json::parse(R"({"type": "conv2d", "in_channels": 3, "out_channels": 4, "kernel_size": 3,
                                "groups": 2})"), "c");
  });
  expect_has(m, "must be multiples of groups 2");
  m = error_of([] { build_layer(json::parse(R"({"type": "linear", "in_features": 3, "out_features": 4, "init": "xavier"})"), "l"); });
  expect_has(m, "l.init = \"xavier\" is not accepted");
  m = error_of([] { build_layer(json::parse(R"({"type": "bottleneck", "in_channels": 3, "planes": 4, "shortcut": "A"})"), "b"); });
  expect_has(m, "b.shortcut = \"A\" is not accepted");
  m = error_of([] { build_layer(json::parse(R"({"type": "relu", "inplace": true})"), "r"); });
  expect_has(m, "unknown key r.inplace");
}

TEST(Registry, SequentialFlattenFeedsLinearInChwOrder) {
  // No layer is linked to another: the flatten gives (c, h, w) columns, the linear takes them.
  auto seq = build_sequential(json::parse(R"([
    {"type": "conv2d", "in_channels": 1, "out_channels": 6, "kernel_size": 3},
    {"type": "relu"}, {"type": "max_pool2d", "kernel_size": 2}, {"type": "flatten"}, {"type": "dropout"},
    {"type": "linear", "in_features": 54, "out_features": 4}, {"type": "linear", "in_features": 4, "out_features": 2}
  ])"), "layers");
  auto* first = dynamic_cast<Linear*>((*seq)[5].get());
  auto* second = dynamic_cast<Linear*>((*seq)[6].get());
  ASSERT_TRUE(first && second);
  EXPECT_EQ(seq->named_parameters()[2].first, "5.weight");
  seq->eval();
  NoGradGuard ng;
  Tensor x = Tensor::from_vector(std::vector<float>(2 * 8 * 8), {2, 8, 8, 1});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>((i * 37) % 11) - 5.0f;
  Tensor pooled = x;  // conv, relu, pool: (2, 3, 3, 6)
  for (size_t i = 0; i < 3; ++i) pooled = (*seq)[i]->forward(pooled);
  ASSERT_EQ(pooled.shape(), (Shape{2, 3, 3, 6}));
  Tensor want = second->forward(first->forward(pooled.permute({0, 3, 1, 2}).contiguous().reshape({2, 54})));
  EXPECT_EQ(seq->forward(x).to_double_vector(), want.to_double_vector());
}

TEST(Silu, TheLayerIsInTheRegistry) {
  using kiln::testing::randn;
  auto layer = build_layer(json{{"type", "silu"}}, "model.layers[0]");
  EXPECT_EQ(layer->to_json(), (json{{"type", "silu"}}));
  Tensor x = randn({2, 3, 3, 4}, 1);
  EXPECT_EQ(layer->forward(x).to_double_vector(), ops::silu(x).to_double_vector());
  EXPECT_THROW(build_layer(json{{"type", "silu"}, {"inplace", true}}, "model.layers[0]"), Error);
}
