// make_optimizer: the registry, options JSON round trips with documented defaults, config errors
// naming the JSON path and what is accepted.
#include <gtest/gtest.h>

#include "optim/adamw.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"
#include "optim/sgd.h"
#include "optim_test_util.h"

using namespace kiln;

namespace {
std::vector<ParamRef> params() { return {kiln::testing::make_param("w", {1.0f, 2.0f})}; }

void expect_error(const std::string& text, const std::string& what, const std::string& path = "optim") {
  try {
    make_optimizer(json::parse(text), params(), path);
    ADD_FAILURE() << "no error for " << text;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}
}  // namespace

TEST(OptimizerFactory, BuildsEachRegisteredType) {
  EXPECT_EQ(optimizer_names(), (std::vector<std::string>{"sgd", "adamw", "lars"}));
  auto sgd = make_optimizer(json::parse(R"({"name": "sgd", "lr": 0.05, "nesterov": true, "weight_decay": 5e-4})"), params());
  EXPECT_EQ(sgd->type(), "sgd");
  EXPECT_DOUBLE_EQ(sgd->lr(), 0.05);
  auto* s = dynamic_cast<SGD*>(sgd.get());
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->options().nesterov);
  EXPECT_DOUBLE_EQ(s->options().momentum, 0.9);  // default
  EXPECT_DOUBLE_EQ(s->options().weight_decay, 5e-4);
  auto adamw = make_optimizer(json::parse(R"({"name": "adamw", "betas": [0.8, 0.95]})"), params());
  auto* a = dynamic_cast<AdamW*>(adamw.get());
  ASSERT_NE(a, nullptr);
  EXPECT_DOUBLE_EQ(a->options().betas[0], 0.8);
  EXPECT_DOUBLE_EQ(a->options().betas[1], 0.95);
  EXPECT_DOUBLE_EQ(a->lr(), 1e-3);  // default
}

TEST(OptimizerFactory, DefaultsAndJsonRoundTrip) {
  EXPECT_EQ(SGDOptions{}.to_json(), json::parse(R"({"name": "sgd", "lr": 0.1, "momentum": 0.9, "dampening": 0.0,
      "nesterov": false, "weight_decay": 0.0, "no_decay_bn_bias": false})"));
  EXPECT_EQ(AdamWOptions{}.to_json(), json::parse(R"({"name": "adamw", "lr": 0.001, "betas": [0.9, 0.999], "eps": 1e-8,
      "weight_decay": 0.01, "amsgrad": false, "no_decay_bn_bias": false})"));
  for (const char* text : {R"({"name": "sgd", "lr": 0.2, "momentum": 0.5, "dampening": 0.1, "weight_decay": 1e-4, "no_decay_bn_bias": true})",
                           R"({"name": "adamw", "lr": 0.01, "betas": [0.5, 0.9], "eps": 1e-6, "amsgrad": true})"}) {
    auto opt = make_optimizer(json::parse(text), params());
    json j = opt->to_json();
    EXPECT_EQ(make_optimizer(j, params())->to_json(), j);
    json given = json::parse(text);
    for (auto [key, value] : given.items()) EXPECT_EQ(j[key], value) << key;
  }
}

TEST(OptimizerFactory, ConfigErrors) {
  expect_error(R"({"name": "adam"})", "optim.name = \"adam\" is not an optimizer (did you mean \"adamw\"?); accepted: sgd, adamw, lars");
  expect_error(R"({"lr": 0.1})", "optim.name is required; accepted: sgd, adamw, lars");
  expect_error(R"({"name": "sgd", "momentun": 0.9})", "unknown key optim.momentun (did you mean optim.momentum?)");
  expect_error(R"({"name": "sgd", "betas": [0.9, 0.99]})", "unknown key optim.betas");
  expect_error(R"({"name": "sgd", "lr": "fast"})", "optim.lr must be a number");
  expect_error(R"({"name": "sgd", "lr": -1})", "optim.lr = -1 is out of range");
  expect_error(R"({"name": "sgd", "momentum": 0, "nesterov": true})", "optim.nesterov = true needs momentum > 0");
  expect_error(R"({"name": "adamw", "betas": [0.9]})", "optim.betas must be [beta1, beta2]");
  expect_error(R"({"name": "adamw", "betas": [0.9, 1.0]})", "optim.betas[1] = 1 must be in [0, 1)");
  expect_error(R"({"name": "sgd", "nesterov": 1})", "train.opt.nesterov must be true or false", "train.opt");
  expect_error(R"([1, 2])", "must be an object");
}

TEST(LossScalerOptions, DefaultsJsonAndErrors) {
  LossScalerOptions d;
  EXPECT_EQ(d.init_scale, 65536.0);
  EXPECT_EQ(d.growth_factor, 2.0);
  EXPECT_EQ(d.backoff_factor, 0.5);
  EXPECT_EQ(d.growth_interval, 2000);
  auto o = LossScalerOptions::from_json(json::parse(R"({"init_scale": 1024, "growth_interval": 10})"));
  EXPECT_EQ(o.init_scale, 1024.0);
  EXPECT_EQ(o.growth_interval, 10);
  EXPECT_EQ(LossScalerOptions::from_json(o.to_json()).to_json(), o.to_json());
  try {
    LossScalerOptions::from_json(json::parse(R"({"init_scael": 8})"));
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown key train.loss_scaler.init_scael (did you mean train.loss_scaler.init_scale?)"),
              std::string::npos) << e.what();
  }
  EXPECT_THROW(LossScalerOptions::from_json(json::parse(R"({"min_scale": 1e6})")), Error);  // above init_scale
  EXPECT_THROW(LossScalerOptions::from_json(json::parse(R"({"backoff_factor": 2})")), Error);
}

TEST(OptimizerFactory, LrMultIsAnAcceptedKeyOfEveryOptimizer) {
  for (const char* name : {"sgd", "adamw", "lars"}) {
    SCOPED_TRACE(name);
    // A typo of lr_mult is answered with lr_mult, which the accepted keys list.
    expect_error(std::string(R"({"name": ")") + name + R"(", "lrmult": {"w": 0.5}})",
                 "unknown key optim.lrmult (did you mean optim.lr_mult?)");
    expect_error(std::string(R"({"name": ")") + name + R"(", "bogus": 1})", ", lr_mult");
    auto opt = make_optimizer(json::parse(std::string(R"({"name": ")") + name + R"(", "lr_mult": {"w": 0.5}})"), params());
    EXPECT_EQ(opt->type(), name);
  }
}
