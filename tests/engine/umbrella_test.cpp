// <kiln/kiln.h> alone (it is this file's first include, so it compiles without any other) is enough
// for a hand-written loop: a Module subclass, ops, a loss, an optimizer straight from
// model->parameters() (stepping exactly as the engine's ParamRef form) and weights saved in
// PyTorch's layout. The full example: examples/custom_loop.cpp (tests/install/install_test.sh).
#include <kiln/kiln.h>

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>

namespace {
class TinyNet : public kiln::Module {
 public:
  TinyNet() : Module("TinyNet") {
    conv = register_module("conv", std::make_shared<kiln::Conv2d>(kiln::Conv2dOptions{
                                       .in_channels = 1, .out_channels = 3, .kernel_size = 3, .padding = 1}));
    bn = register_module("bn", std::make_shared<kiln::BatchNorm2d>(kiln::BatchNormOptions{.num_features = 3}));
    fc = register_module("fc", std::make_shared<kiln::Linear>(kiln::LinearOptions{.in_features = 3 * 4 * 4, .out_features = 5}));
  }
  kiln::Tensor forward(const kiln::Tensor& x) override {
    return (*fc)(kiln::ops::relu((*bn)((*conv)(x))).flatten());
  }
  std::shared_ptr<kiln::Conv2d> conv;
  std::shared_ptr<kiln::BatchNorm2d> bn;
  std::shared_ptr<kiln::Linear> fc;
};

std::shared_ptr<TinyNet> net_with_seed(uint64_t seed) {
  kiln::manual_seed(seed);
  return std::make_shared<TinyNet>();
}

// Three steps of the loop a user writes; returns the losses.
std::vector<double> train(TinyNet& net, kiln::Optimizer& opt) {
  kiln::manual_seed(42);
  const kiln::Tensor x = kiln::rand_normal({6, 4, 4, 1}, 0.0, 1.0);  // NHWC
  const kiln::Tensor y = kiln::Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 0}, {6});
  std::vector<double> losses;
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    kiln::Tensor loss = kiln::ops::cross_entropy(net(x), y);
    loss.backward();
    opt.step();
    losses.push_back(loss.item());
  }
  return losses;
}
}  // namespace

TEST(Umbrella, ParametersStepAsTheEngineForm) {
  auto direct = net_with_seed(7);
  kiln::SGD direct_opt(direct->parameters(), {.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3});
  // The engine's form: named ParamRefs, nothing marked no_decay (decay on all, as the direct form).
  auto engine = net_with_seed(7);
  std::vector<kiln::ParamRef> refs;
  for (auto& [name, t] : engine->named_parameters()) refs.push_back({name, t});
  kiln::SGD engine_opt(refs, {.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3});
  const std::vector<double> a = train(*direct, direct_opt), b = train(*engine, engine_opt);
  EXPECT_EQ(a, b);
  EXPECT_LT(a.back(), a.front());  // it learns
  for (auto& [name, t] : direct->state_dict()) EXPECT_EQ(t.to_double_vector(), engine->state_dict().at(name).to_double_vector()) << name;
}

TEST(Umbrella, SavesInPytorchLayoutAndReloads) {
  auto net = net_with_seed(3);
  const std::string file = ::testing::TempDir() + "/kiln_umbrella_test_" + std::to_string(::getpid()) + ".safetensors";
  kiln::save_weights(*net, file, kiln::WeightLayout::pytorch);
  auto fresh = net_with_seed(4);
  kiln::load_weights(*fresh, file, kiln::WeightLayout::pytorch);
  std::remove(file.c_str());
  net->eval();
  fresh->eval();
  const kiln::Tensor x = kiln::rand_normal({2, 4, 4, 1}, 0.0, 1.0);
  EXPECT_EQ((*net)(x).to_float_vector(), (*fresh)(x).to_float_vector());
  EXPECT_EQ(kiln::ops::argmax((*net)(x), 1).to_int_vector(), kiln::ops::argmax((*fresh)(x), 1).to_int_vector());
}
