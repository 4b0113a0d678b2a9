// Module system: names and order of parameters/buffers, state dicts (round trip and strict-load
// errors), train/eval propagation, submodule lookup, registration errors.
#include <gtest/gtest.h>

#include "core/rng.h"
#include "layers/conv.h"
#include "layers/linear.h"
#include "layers/norm.h"
#include "layers/sequential.h"

using namespace kiln;

namespace {
std::shared_ptr<Sequential> small_net() {
  auto net = std::make_shared<Sequential>();
  Conv2dOptions c;
  c.in_channels = 3;
  c.out_channels = 4;
  c.kernel_size = 3;
  net->push_back(std::make_shared<Conv2d>(c));
  BatchNormOptions b;
  b.num_features = 4;
  net->push_back(std::make_shared<BatchNorm2d>(b));
  auto inner = std::make_shared<Sequential>();
  LinearOptions l;
  l.in_features = 4;
  l.out_features = 2;
  inner->push_back(std::make_shared<Linear>(l));
  net->push_back(inner);
  return net;
}

std::vector<std::string> names(const NamedTensors& v) {
  std::vector<std::string> out;
  for (auto& kv : v) out.push_back(kv.first);
  return out;
}

// A module that registers things by hand, to test the protected API.
class Custom : public Module {
 public:
  Custom() : Module("custom") {
    w = register_parameter("w", Tensor::ones({2}));
    b = register_buffer("b", Tensor::zeros({2}));
  }
  Tensor forward(const Tensor& x) override { return x; }
  json to_json() const override { return {{"type", "custom"}}; }
  void add_again() { register_parameter("w", Tensor::ones({1})); }
  void add_dotted() { register_buffer("a.b", Tensor::ones({1})); }
  Tensor w, b;
};
}  // namespace

TEST(Module, NamesFollowTorchInRegistrationOrder) {
  auto net = small_net();
  EXPECT_EQ(names(net->named_parameters()),
            (std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias", "2.0.weight", "2.0.bias"}));
  EXPECT_EQ(names(net->named_buffers()),
            (std::vector<std::string>{"1.running_mean", "1.running_var", "1.num_batches_tracked"}));
  EXPECT_EQ(net->num_parameters(), 4 * 3 * 3 * 3 + 4 + 4 + 4 + 2 * 4 + 2);
  StateDict sd = net->state_dict();
  EXPECT_EQ(sd.size(), 9u);
  EXPECT_EQ(sd["0.weight"].shape(), (Shape{4, 3, 3, 3}));
  EXPECT_EQ(sd["1.num_batches_tracked"].dtype(), DType::i64);
  EXPECT_EQ(sd["1.num_batches_tracked"].dim(), 0);
  for (auto& p : net->parameters()) EXPECT_TRUE(p.requires_grad());
  for (auto& kv : net->named_buffers()) EXPECT_FALSE(kv.second.requires_grad());
  // named_modules walks the tree depth-first with dotted paths.
  std::vector<std::string> mods;
  for (auto& kv : net->named_modules()) mods.push_back(kv.first + ":" + kv.second->type());
  EXPECT_EQ(mods, (std::vector<std::string>{":sequential", "0:conv2d", "1:batch_norm2d", "2:sequential", "2.0:linear"}));
}

TEST(Module, StateDictSharesStorageAndRoundTrips) {
  manual_seed(1);
  auto a = small_net();
  manual_seed(2);
  auto b = small_net();
  EXPECT_NE(a->state_dict()["0.weight"].to_double_vector(), b->state_dict()["0.weight"].to_double_vector());
  a->state_dict()["1.running_mean"].fill_(0.25);  // shares storage with the buffer
  b->load_state_dict(a->state_dict());
  auto sa = a->state_dict(), sb = b->state_dict();
  for (auto& [name, t] : sa) EXPECT_EQ(t.to_double_vector(), sb[name].to_double_vector()) << name;
  EXPECT_EQ(sb["1.running_mean"].to_double_vector(), std::vector<double>(4, 0.25));
  // The layer's own handle sees the loaded values (in place).
  auto* conv = dynamic_cast<Conv2d*>((*b)[0].get());
  EXPECT_EQ(conv->weight.to_double_vector(), sa["0.weight"].to_double_vector());
  EXPECT_TRUE(conv->weight.requires_grad());
}

TEST(Module, SameSeedSameModel) {
  manual_seed(42);
  auto a = small_net();
  manual_seed(42);
  auto b = small_net();
  for (auto& [name, t] : a->state_dict()) EXPECT_EQ(t.to_double_vector(), b->state_dict()[name].to_double_vector());
}

TEST(Module, StrictLoadListsEveryProblem) {
  auto net = small_net();
  StateDict sd = net->state_dict();
  sd.erase("0.bias");
  sd.erase("1.running_var");
  sd["extra.weight"] = Tensor::zeros({1});
  sd["2.0.weight"] = Tensor::zeros({3, 4});
  try {
    net->load_state_dict(sd);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("Missing keys: 0.bias, 1.running_var"), std::string::npos) << m;
    EXPECT_NE(m.find("Unexpected keys: extra.weight"), std::string::npos) << m;
    EXPECT_NE(m.find("2.0.weight ([3, 4], expected [2, 4])"), std::string::npos) << m;
  }
  // Not strict: missing and unexpected keys are fine, a wrong shape is not.
  EXPECT_THROW(net->load_state_dict(sd, false), Error);
  sd["2.0.weight"] = Tensor::full({2, 4}, 0.5);
  net->load_state_dict(sd, false);
  EXPECT_EQ(net->state_dict()["2.0.weight"].to_double_vector(), std::vector<double>(8, 0.5));
}

TEST(Module, LoadConvertsDtypes) {
  auto net = small_net();
  StateDict sd = net->state_dict();
  sd["1.num_batches_tracked"] = Tensor::scalar(7, DType::f32);
  sd["1.running_mean"] = Tensor::full({4}, 1.5, DType::f64);
  net->load_state_dict(sd);
  EXPECT_EQ(net->state_dict()["1.num_batches_tracked"].to_int_vector(), std::vector<int64_t>{7});
  EXPECT_EQ(net->state_dict()["1.running_mean"].dtype(), DType::f32);
  EXPECT_EQ(net->state_dict()["1.running_mean"].to_double_vector(), std::vector<double>(4, 1.5));
}

TEST(Module, TrainEvalPropagates) {
  auto net = small_net();
  EXPECT_TRUE(net->is_training());
  net->eval();
  for (auto& kv : net->named_modules()) EXPECT_FALSE(kv.second->is_training()) << kv.first;
  net->train();
  for (auto& kv : net->named_modules()) EXPECT_TRUE(kv.second->is_training()) << kv.first;
}

TEST(Module, SubmoduleLookup) {
  auto net = small_net();
  EXPECT_EQ(net->submodule("2.0").type(), "linear");
  EXPECT_EQ(net->submodule("1").type(), "batch_norm2d");
  try {
    net->submodule("2.1");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no submodule '2.1'"), std::string::npos) << e.what();
  }
}

TEST(Module, RegistrationErrors) {
  Custom c;
  EXPECT_EQ(names(c.named_parameters()), std::vector<std::string>{"w"});
  EXPECT_EQ(names(c.named_buffers()), std::vector<std::string>{"b"});
  EXPECT_THROW(c.add_again(), Error);
  EXPECT_THROW(c.add_dotted(), Error);
}

TEST(Module, ToSameDeviceKeepsHandlesAndZeroGrad) {
  Custom c;
  c.w.set_grad(Tensor::ones({2}));
  c.to(Device::cpu());
  EXPECT_TRUE(c.named_parameters()[0].second.same(c.w));
  EXPECT_TRUE(c.w.grad().defined());
  c.zero_grad();
  EXPECT_FALSE(c.w.grad().defined());
}
