// Optimizers built directly from a model's tensors (`SGD opt(model->parameters(), {...})`, param_refs,
// optim/param.h): the same steps as the engine's ParamRef form over equal values, weight decay on
// every tensor given unless no_decay_bn_bias, the names that key the state, and LARS's refusal of
// name-based exclusion on unnamed tensors. A Module's parameters() through the umbrella header:
// tests/engine/umbrella_test.cpp.
#include <gtest/gtest.h>

#include <utility>

#include "optim/adamw.h"
#include "optim/lars.h"
#include "optim/sgd.h"
#include "optim_test_util.h"

using namespace kiln;
using kiln::testing::copy_params;
using kiln::testing::make_param;

namespace {
// A conv weight, its bias and a batch norm's weight, as a model's named_parameters() lists them.
std::vector<ParamRef> three_params() {
  return {make_param("conv.weight", {0.5f, -1.0f, 2.0f, 0.25f}, {2, 1, 1, 2}),
          make_param("conv.bias", {0.1f, -0.2f}), make_param("bn.weight", {1.0f, 1.5f})};
}

std::vector<Tensor> tensors_of(const std::vector<ParamRef>& ps) {
  std::vector<Tensor> out;
  for (const auto& p : ps) out.push_back(p.param);
  return out;
}

std::vector<std::pair<std::string, Tensor>> named_of(const std::vector<ParamRef>& ps) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& p : ps) out.emplace_back(p.name, p.param);
  return out;
}

// Three steps with the same gradients on both lists; every parameter's values must be equal bit for bit.
void expect_same_steps(Optimizer& a, const std::vector<ParamRef>& pa, Optimizer& b, const std::vector<ParamRef>& pb) {
  for (int step = 0; step < 3; ++step) {
    for (size_t i = 0; i < pa.size(); ++i) {
      std::vector<float> g(static_cast<size_t>(pa[i].param.numel()));
      for (size_t k = 0; k < g.size(); ++k) g[k] = 0.1f * static_cast<float>(k + 1) - 0.05f * static_cast<float>(step + i);
      kiln::testing::set_grad(pa[i], g);
      kiln::testing::set_grad(pb[i], g);
    }
    a.step();
    b.step();
  }
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_EQ(pa[i].param.to_float_vector(), pb[i].param.to_float_vector()) << pa[i].name;
}
}  // namespace

TEST(DirectParams, SgdFromTensorsStepsAsTheParamRefForm) {
  // Weight decay on every tensor given (torch.optim's rule), so the ParamRef form marks nothing no_decay.
  auto engine_params = three_params();
  auto direct_params = copy_params(engine_params);
  SGDOptions o;
  o.lr = 0.05;
  o.momentum = 0.9;
  o.weight_decay = 0.01;
  SGD engine(engine_params, o);
  SGD direct(tensors_of(direct_params), o);
  expect_same_steps(engine, engine_params, direct, direct_params);
  // Decay did reach the 1-D bias: without it the values differ.
  auto no_decay = copy_params(three_params());
  SGDOptions plain = o;
  plain.weight_decay = 0;
  SGD undecayed(tensors_of(no_decay), plain);
  auto again = copy_params(three_params());
  SGD decayed(tensors_of(again), o);
  for (int s = 0; s < 2; ++s) {
    for (auto* ps : {&no_decay, &again}) kiln::testing::set_grad((*ps)[1], {0.0f, 0.0f});
    undecayed.step();
    decayed.step();
  }
  EXPECT_NE(no_decay[1].param.to_float_vector(), again[1].param.to_float_vector());
}

TEST(DirectParams, NoDecayBnBiasSparesTheOneDimensionalTensors) {
  // With no_decay_bn_bias the direct form leaves the 1-D tensors undecayed, as the engine's
  // mark_no_decay_1d + no_decay_bn_bias does.
  auto engine_params = three_params();
  mark_no_decay_1d(engine_params);
  auto direct_params = copy_params(three_params());
  AdamWOptions o;
  o.lr = 0.01;
  o.weight_decay = 0.1;
  o.no_decay_bn_bias = true;
  AdamW engine(engine_params, o);
  AdamW direct(named_of(direct_params), o);
  EXPECT_FALSE(direct.params()[0].no_decay);
  EXPECT_TRUE(direct.params()[1].no_decay);
  EXPECT_TRUE(direct.params()[2].no_decay);
  expect_same_steps(engine, engine_params, direct, direct_params);
}

TEST(DirectParams, NamesKeyTheState) {
  auto a = three_params();
  SGD by_position(tensors_of(a), SGDOptions{});
  auto b = copy_params(three_params());
  SGD by_name(named_of(b), SGDOptions{});
  for (auto* ps : {&a, &b})
    for (auto& p : *ps) kiln::testing::set_grad(p, std::vector<float>(static_cast<size_t>(p.param.numel()), 1.0f));
  by_position.step();
  by_name.step();
  EXPECT_EQ(by_position.params()[2].name, "params[2]");
  EXPECT_TRUE(by_position.state_dict().tensors.count("params[2].momentum_buffer"));
  EXPECT_TRUE(by_name.state_dict().tensors.count("bn.weight.momentum_buffer"));
}

TEST(DirectParams, LarsNeedsNamesToExclude) {
  auto a = three_params();
  try {
    LARS opt(tensors_of(a), LARSOptions{});
    FAIL() << "LARS excluded by name from unnamed tensors";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("named_parameters()"), std::string::npos) << msg;
    EXPECT_NE(msg.find("exclude = {}"), std::string::npos) << msg;
  }
  LARSOptions all;
  all.exclude = {};
  LARS unnamed(tensors_of(a), all);
  EXPECT_EQ(unnamed.excluded(), (std::vector<bool>{false, false, false}));
  auto b = copy_params(three_params());
  LARS named(named_of(b), LARSOptions{});
  EXPECT_EQ(named.excluded(), (std::vector<bool>{false, true, true}));  // conv.bias, bn.weight (a norm layer)
}
