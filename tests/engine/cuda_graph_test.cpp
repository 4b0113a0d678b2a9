// train.cuda_graph's decisions where no GPU is needed (tools/engine/cuda_graph.h):
//  - the option: auto, on, off accepted, anything else an error naming train.cuda_graph and the values;
//    the default "off"; "on" with device=cpu an error, "auto" there no graph at all;
//  - what refuses a capture (graph_refusal), each reason named: no update, several ranks, the loss
//    read each step, dropout, a device without graphs;
//  - the key of what a capture freezes: shapes, dtypes, the u8 normalisation, the split, the host's
//    loss scale; not the batch's values;
//  - the schedule: `warmup` eager steps of one key in a row, then a capture; another key in between
//    starts the count again; a failed capture's key stays eager;
//  - a StepGraph on a CPU setup: one line naming why, every step eager and equal to a step without it;
//    "on" there is an error;
//  - with stand-in capture kernels: a failed capture's fallback, and a replay's bookkeeping (below);
//  - what leaves the update out of the graph (update_refusal), each reason named: the fp16 verdict
//    read back, an optimizer's host values; SGD, LARS and AdamW captured, with clipping too (decided
//    on the device); the key says which, and changes with the optimizer's state (load_state_dict)
//    and lr_mult when the update is captured;
//  - with stand-in capture kernels: SGD's (clipped or not) and AdamW's update is inside the captured
//    work (a stand-in replay, which runs nothing, leaves the weights) and AdamW's step counts advance
//    per replay; an optimizer with host values runs its update after the replay, with one line.
// The replays themselves: tests/gpu/cuda_graph_test.cpp.
#include <gtest/gtest.h>

#include "core/rng.h"
#include "models/registry.h"
#include "optim/adamw.h"
#include "optim/lars.h"
#include "optim/sgd.h"
#include "optim/param.h"
#include "tools/engine/train_options.h"
#include "tools/engine/cuda_graph.h"
#include "tools/engine/train_step.h"

using namespace kiln;

namespace {

std::shared_ptr<Module> net(bool dropout) {
  manual_seed(3);
  json layers = json::array({{{"type", "conv2d"}, {"in_channels", 3}, {"out_channels", 4}, {"kernel_size", 3}, {"padding", 1}},
                             {{"type", "relu"}},
                             {{"type", "flatten"}},
                             {{"type", "linear"}, {"in_features", 4 * 8 * 8}, {"out_features", 5}}});
  if (dropout) layers.insert(layers.begin() + 3, json{{"type", "dropout"}, {"p", 0.25}});
  return models::build_model(json{{"layers", layers}}, "model");
}

std::vector<ParamRef> params_of(Module& m) {
  std::vector<ParamRef> ps;
  for (auto& [name, p] : m.named_parameters()) ps.push_back({name, p, false});
  return ps;
}

// An SGD whose kernels (as if) took per-step host values: its update stays out of the graph.
struct HostValuedSgd : SGD {
  using SGD::SGD;
  std::string capture_refusal() const override { return "stand-in: host values"; }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(CudaGraphOption, AcceptsAutoOnOffAndNamesTheKeyOtherwise) {
  EXPECT_EQ(parse_graph_mode("auto"), GraphMode::automatic);
  EXPECT_EQ(parse_graph_mode("on"), GraphMode::on);
  EXPECT_EQ(parse_graph_mode("off"), GraphMode::off);
  const std::string e = error_of([] { parse_graph_mode("yes"); });
  EXPECT_NE(e.find("train.cuda_graph"), std::string::npos) << e;
  EXPECT_NE(e.find("\"auto\", \"on\", \"off\""), std::string::npos) << e;

  EXPECT_EQ(TrainOptions::from_json(json::object(), "train").cuda_graph, "off");
  const TrainOptions on = TrainOptions::from_json(json{{"cuda_graph", "on"}}, "train");
  EXPECT_EQ(on.cuda_graph, "on");
  EXPECT_EQ(TrainOptions::from_json(on.to_json(), "train").cuda_graph, "on");
  const std::string bad = error_of([] { TrainOptions::from_json(json{{"cuda_graph", "always"}}, "train"); });
  EXPECT_NE(bad.find("cuda_graph"), std::string::npos) << bad;
  EXPECT_NE(bad.find("auto"), std::string::npos) << bad;
  EXPECT_FALSE(error_of([] { TrainOptions::from_json(json{{"cuda_graph", true}}, "train"); }).empty());
  EXPECT_EQ(step_options(on).cuda_graph, "on");
}

TEST(CudaGraphOption, OnTheCpuAutoBuildsNoGraphAndOnIsAnError) {
  auto m = net(false);
  SGD opt(params_of(*m), SGDOptions{});
  StepOptions o;
  o.cuda_graph = "auto";
  EXPECT_EQ(make_step_setup(o, Device::cpu(), opt).graph, nullptr);
  o.cuda_graph = "off";
  EXPECT_EQ(make_step_setup(o, Device::cpu(), opt).graph, nullptr);
  o.cuda_graph = "on";
  const std::string e = error_of([&] { make_step_setup(o, Device::cpu(), opt); });
  EXPECT_NE(e.find("train.cuda_graph"), std::string::npos) << e;
  EXPECT_NE(e.find("needs a CUDA device"), std::string::npos) << e;
  EXPECT_NE(e.find("cpu"), std::string::npos) << e;
  o.cuda_graph = "sometimes";
  EXPECT_FALSE(error_of([&] { make_step_setup(o, Device::cpu(), opt); }).empty());
}

TEST(CudaGraphRefusal, NamesWhatMakesAStepUncapturable) {
  auto plain = net(false), dropout = net(true);
  StepSetup s;  // the CPU: no graphs
  s.read_loss = false;
  EXPECT_NE(graph_refusal(s, *plain).find("device cpu has no graphs"), std::string::npos) << graph_refusal(s, *plain);
  EXPECT_NE(graph_refusal(s, *dropout).find("dropout"), std::string::npos) << graph_refusal(s, *dropout);
  s.read_loss = true;
  EXPECT_NE(graph_refusal(s, *plain).find("loss is read"), std::string::npos);
  s.read_loss = false;
  s.update = false;
  EXPECT_NE(graph_refusal(s, *plain).find("without an update"), std::string::npos);
  s.update = true;
  GradSync* fake = reinterpret_cast<GradSync*>(&s);  // only compared with null
  s.sync = fake;
  EXPECT_NE(graph_refusal(s, *plain).find("several ranks"), std::string::npos);
}

TEST(CudaGraphKey, ChangesWithWhatACaptureFreezesOnly) {
  StepSetup s;
  Generator g(1);
  Tensor x = rand_normal({8, 4, 4, 3}, 0, 1, DType::f32, Device::cpu(), &g);
  Tensor x2 = rand_normal({8, 4, 4, 3}, 0, 1, DType::f32, Device::cpu(), &g);
  Tensor y = Tensor::zeros({8}, DType::i64);
  const std::string k = StepGraph::key_of(StepBatch{x, y, Tensor()}, s);
  EXPECT_EQ(StepGraph::key_of(StepBatch{x2, y, Tensor()}, s), k);  // other values, same graph
  EXPECT_NE(StepGraph::key_of(StepBatch{x.slice(0, 0, 5).contiguous(), y.slice(0, 0, 5).contiguous(), Tensor()}, s), k);
  EXPECT_NE(StepGraph::key_of(StepBatch{x.to(DType::bf16), y, Tensor()}, s), k);
  EXPECT_NE(StepGraph::key_of(StepBatch{x, y, Tensor::zeros({8, 5})}, s), k);  // soft targets
  StepSetup two = s;
  two.accumulate = 2;
  EXPECT_NE(StepGraph::key_of(StepBatch{x, y, Tensor()}, two), k);
  // u8 images: the normalisation is a kernel argument
  Tensor u = Tensor::zeros({8, 4, 4, 3}, DType::u8);
  NormalizeOptions n1, n2;
  n2.mean = {0.5};
  EXPECT_NE(StepGraph::key_of(StepBatch{u, y, Tensor(), n1}, s), StepGraph::key_of(StepBatch{u, y, Tensor(), n2}, s));
  // the host-mode loss scale multiplies the loss as a kernel argument
  StepSetup fp16 = s;
  fp16.scaler = std::make_shared<LossScaler>();
  const std::string k16 = StepGraph::key_of(StepBatch{x, y, Tensor()}, fp16);
  fp16.scaler->update(true);  // a skip halves the scale
  EXPECT_NE(StepGraph::key_of(StepBatch{x, y, Tensor()}, fp16), k16);
}

TEST(CudaGraphSchedule, WarmsUpPerKeyThenCaptures) {
  StepGraph g(GraphMode::automatic, 2);
  EXPECT_EQ(g.decide("A"), "eager");
  EXPECT_EQ(g.decide("A"), "eager");
  EXPECT_EQ(g.decide("B"), "eager");  // another key in between: A starts again
  EXPECT_EQ(g.decide("A"), "eager");
  EXPECT_EQ(g.decide("A"), "eager");
  EXPECT_EQ(g.decide("A"), "capture");
  StepGraph one(GraphMode::on, 1);
  EXPECT_EQ(one.decide("A"), "eager");
  EXPECT_EQ(one.decide("A"), "capture");
  EXPECT_THROW(StepGraph(GraphMode::on, 0), Error);
}

TEST(CudaGraphOnCpu, AutoRunsEveryStepEagerlyWithOneLineAndTheSameResult) {
  auto a = net(false), b = net(false);
  SGD oa(params_of(*a), SGDOptions{}), ob(params_of(*b), SGDOptions{});
  StepOptions o;
  StepSetup sa = make_step_setup(o, Device::cpu(), oa), sb = make_step_setup(o, Device::cpu(), ob);
  sb.read_loss = false;
  sa.read_loss = false;
  sb.graph = std::make_shared<StepGraph>(GraphMode::automatic);
  std::vector<std::string> lines;
  sb.graph->log = [&](const std::string& l) { lines.push_back(l); };
  Generator g(5);
  for (int i = 0; i < 4; ++i) {
    Tensor x = rand_normal({6, 8, 8, 3}, 0, 1, DType::f32, Device::cpu(), &g);
    Tensor y = Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 0}, {6});
    EXPECT_TRUE(train_step(*a, oa, StepBatch{x, y, Tensor()}, sa).stepped);
    EXPECT_TRUE(train_step(*b, ob, StepBatch{x, y, Tensor()}, sb).stepped);
  }
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("cuda_graph: eager: device cpu has no graphs"), std::string::npos) << lines[0];
  EXPECT_EQ(sb.graph->counts().eager, 4);
  EXPECT_EQ(sb.graph->counts().captures, 0);
  auto pa = a->named_parameters(), pb = b->named_parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_EQ(pa[i].second.to_double_vector(), pb[i].second.to_double_vector()) << pa[i].first;

  sb.graph = std::make_shared<StepGraph>(GraphMode::on);
  const std::string e = error_of([&] {
    train_step(*b, ob, StepBatch{rand_normal({6, 8, 8, 3}, 0, 1, DType::f32, Device::cpu(), &g),
                                 Tensor::zeros({6}, DType::i64), Tensor()}, sb);
  });
  EXPECT_NE(e.find("train.cuda_graph: \"on\""), std::string::npos) << e;
  EXPECT_NE(e.find("no graphs"), std::string::npos) << e;
}

// StepGraph's plumbing with stand-in capture kernels on the CPU (the CPU runs work at once, so a
// "capture" here computes the step and a "replay" does nothing: only the bookkeeping is tested):
//  - a capture whose end fails: the step runs eagerly from its start with one line naming the error,
//    that key is never captured again, and the weights equal steps without a graph;
//  - a replay: the parameters' .grad are the captured tensors again even after an eager step of
//    another shape set others, and on_micro receives each captured micro-batch's outputs.
namespace {

struct FakeCapture {
  static inline int begins = 0, abandons = 0, replays = 0;
  static inline bool fail = false;
  struct Work : CapturedWork {
    void replay() override { ++replays; }
  };
  FakeCapture() {
    (void)can_capture(Device::cpu());  // registers the real kernels first, so that ours stay set
    begins = abandons = replays = 0;
    begin_capture_kernel.set(DeviceType::CPU, [](int) { ++begins; });
    end_capture_kernel.set(DeviceType::CPU, [](int) -> std::shared_ptr<CapturedWork> {
      if (fail) throw Error("stand-in: cudaErrorStreamCaptureUnsupported");
      return std::make_shared<Work>();
    });
    abandon_capture_kernel.set(DeviceType::CPU, [](int) { ++abandons; });
  }
  ~FakeCapture() {
    begin_capture_kernel.set(DeviceType::CPU, nullptr);
    end_capture_kernel.set(DeviceType::CPU, nullptr);
    abandon_capture_kernel.set(DeviceType::CPU, nullptr);
  }
};

}  // namespace

TEST(CudaGraphFallback, AFailedCaptureRunsTheStepEagerlyOnceNamedAndKeepsThatKeyEager) {
  FakeCapture fake;
  FakeCapture::fail = true;
  auto a = net(false), b = net(false);
  SGD oa(params_of(*a), SGDOptions{});
  // With the update outside the graph (host values): the stand-in "capture" runs the micro-batches
  // at once on the CPU, which the eager fallback repeats harmlessly; a captured update would run twice.
  HostValuedSgd ob(params_of(*b), SGDOptions{});
  StepSetup sa = make_step_setup(StepOptions{}, Device::cpu(), oa), sb = make_step_setup(StepOptions{}, Device::cpu(), ob);
  sa.read_loss = sb.read_loss = false;
  sb.graph = std::make_shared<StepGraph>(GraphMode::on);  // on: a failed capture still falls back
  std::vector<std::string> lines;
  sb.graph->log = [&](const std::string& l) { lines.push_back(l); };
  Generator g(9);
  for (int i = 0; i < 6; ++i) {
    Tensor x = rand_normal({6, 8, 8, 3}, 0, 1, DType::f32, Device::cpu(), &g);
    Tensor y = Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 0}, {6});
    EXPECT_TRUE(train_step(*a, oa, StepBatch{x, y, Tensor()}, sa).stepped);
    EXPECT_TRUE(train_step(*b, ob, StepBatch{x, y, Tensor()}, sb).stepped);
  }
  EXPECT_EQ(FakeCapture::begins, 1);  // step 2 only: the key stays eager after
  EXPECT_EQ(FakeCapture::abandons, 1);
  EXPECT_EQ(sb.graph->counts().failed_captures, 1);
  EXPECT_EQ(sb.graph->counts().eager, 6);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("the update runs eagerly after each replay: stand-in"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("capture of this step failed"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("cudaErrorStreamCaptureUnsupported"), std::string::npos) << lines[1];
  auto pa = a->named_parameters(), pb = b->named_parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_EQ(pa[i].second.to_double_vector(), pb[i].second.to_double_vector()) << pa[i].first;
}

TEST(CudaGraphFallback, AReplayPutsTheCapturedGradientsBackAndHandsOnItsOutputs) {
  FakeCapture fake;
  FakeCapture::fail = false;
  auto m = net(false);
  SGDOptions so;
  so.momentum = 0;  // no state made by the first step: its key is the next steps'
  SGD opt(params_of(*m), so);
  StepSetup s = make_step_setup(StepOptions{}, Device::cpu(), opt);
  s.read_loss = false;
  s.accumulate = 2;
  s.graph = std::make_shared<StepGraph>(GraphMode::automatic, 1);
  s.graph->log = [](const std::string&) {};
  Generator g(4);
  auto batch = [&](int64_t n) {
    std::vector<int64_t> y;
    for (int64_t i = 0; i < n; ++i) y.push_back(i % 5);
    return StepBatch{rand_normal({n, 8, 8, 3}, 0, 1, DType::f32, Device::cpu(), &g), Tensor::from_vector(y, {n}),
                     Tensor()};
  };
  std::vector<int64_t> sizes;
  auto count = [&](const MicroBatchOut& mo) { sizes.push_back(mo.size); };
  train_step(*m, opt, batch(6), s, count);  // eager (warm-up 1)
  train_step(*m, opt, batch(6), s, count);  // captured, replayed
  ASSERT_EQ(s.graph->counts().captures, 1);
  std::vector<Tensor> captured;
  for (auto& [name, p] : m->named_parameters()) captured.push_back(p.grad());
  train_step(*m, opt, batch(5), s, count);  // another shape: eager, sets other gradients
  size_t j = 0;
  for (auto& [name, p] : m->named_parameters()) EXPECT_NE(p.grad().raw_data(), captured[j++].raw_data()) << name;
  train_step(*m, opt, batch(6), s, count);  // replayed: the captured gradients again
  size_t i = 0;
  for (auto& [name, p] : m->named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_EQ(p.grad().raw_data(), captured[i++].raw_data()) << name;
  }
  EXPECT_EQ(FakeCapture::replays, 2);
  EXPECT_EQ(s.graph->counts().replays, 2);
  EXPECT_EQ(sizes, (std::vector<int64_t>{3, 3, 3, 3, 3, 2, 3, 3}));  // two micro-batches a step
}

TEST(CudaGraphUpdate, NamesWhatKeepsTheUpdateOutOfTheGraph) {
  auto m = net(false);
  SGD sgd(params_of(*m), SGDOptions{});
  LARS lars(params_of(*m), LARSOptions{});
  AdamW adamw(params_of(*m), AdamWOptions{});
  StepSetup s = make_step_setup(StepOptions{}, Device::cpu(), sgd);
  EXPECT_EQ(update_refusal(s, sgd), "");
  EXPECT_EQ(update_refusal(s, lars), "");
  EXPECT_EQ(update_refusal(s, adamw), "");
  StepSetup clip = s;
  clip.clip_grad_norm = 1.0;
  EXPECT_EQ(update_refusal(clip, sgd), "");  // the coefficient is computed and applied on the device
  HostValuedSgd host(params_of(*m), SGDOptions{});
  EXPECT_EQ(update_refusal(s, host), "stand-in: host values");
  // fp16 with the verdict read back (on the CPU, reading is free): named with make_step_setup's reason
  StepOptions o16;
  o16.precision = "fp16";
  StepSetup fp16 = make_step_setup(o16, Device::cpu(), sgd);
  ASSERT_NE(fp16.scaler, nullptr);
  ASSERT_FALSE(fp16.scaler_on_device);
  EXPECT_NE(update_refusal(fp16, sgd).find("verdict is read back"), std::string::npos) << update_refusal(fp16, sgd);
  // the verdict on the device (as on a GPU): captured with SGD
  fp16.scaler_on_device = true;
  EXPECT_EQ(update_refusal(fp16, sgd), "");
}

TEST(CudaGraphUpdate, TheKeySaysWhetherTheUpdateIsCapturedAndFollowsTheOptimizersState) {
  auto m = net(false);
  SGD sgd(params_of(*m), SGDOptions{});
  AdamW adamw(params_of(*m), AdamWOptions{});
  StepSetup s = make_step_setup(StepOptions{}, Device::cpu(), sgd);
  Tensor x = Tensor::zeros({6, 8, 8, 3}), y = Tensor::zeros({6}, DType::i64);
  const StepBatch b{x, y, Tensor()};
  EXPECT_EQ(StepGraph::key_of(b, s).find("update"), std::string::npos);  // no optimizer: the old key
  StepOptions o16;
  o16.precision = "fp16";  // on the CPU the verdict is read back: the update stays eager
  EXPECT_NE(StepGraph::key_of(b, make_step_setup(o16, Device::cpu(), adamw), &adamw).find("update eager"),
            std::string::npos);
  EXPECT_NE(StepGraph::key_of(b, s, &adamw).find("update captured, adamw #"), std::string::npos);
  const std::string k0 = StepGraph::key_of(b, s, &sgd);
  EXPECT_NE(k0.find("update captured, sgd #"), std::string::npos) << k0;
  EXPECT_EQ(StepGraph::key_of(b, s, &sgd), k0);
  // The first step makes the momentum buffers: their addresses are in the key.
  s.read_loss = false;
  train_step(*m, sgd, b, s);
  const std::string k1 = StepGraph::key_of(b, s, &sgd);
  EXPECT_NE(k1, k0);
  sgd.set_lr(0.01);  // the learning rate is a device value: not frozen, not in the key
  train_step(*m, sgd, b, s);
  EXPECT_EQ(StepGraph::key_of(b, s, &sgd), k1);
  sgd.load_state_dict(sgd.state_dict());  // new buffers: the graph's tables would point at the old ones
  const std::string k2 = StepGraph::key_of(b, s, &sgd);
  EXPECT_NE(k2, k1);
  sgd.set_lr_mult({{"0", 0.5}}, "optim.lr_mult");  // lr_mult is in the captured tables
  EXPECT_NE(StepGraph::key_of(b, s, &sgd), k2);
}

// With stand-in capture kernels (FakeCapture above: a "capture" runs the work at once, a replay
// runs nothing), where the update runs shows in the weights: inside the captured work, the step
// that captures updates them once and a replay leaves them; after the replay (host values), every step does.
TEST(CudaGraphUpdate, SgdsAndAdamWsUpdateIsInTheCapturedWorkAHostValuedOneRunsAfterTheReplay) {
  FakeCapture fake;
  FakeCapture::fail = false;
  auto weights = [](Module& m) {
    std::vector<double> w;
    for (auto& [name, p] : m.named_parameters())
      for (double v : p.to_double_vector()) w.push_back(v);
    return w;
  };
  Generator g(21);
  Tensor x = rand_normal({6, 8, 8, 3}, 0, 1, DType::f32, Device::cpu(), &g);
  Tensor y = Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 0}, {6});
  const StepBatch b{x, y, Tensor()};
  for (const std::string name : {"sgd", "adamw", "sgd clipped", "host-valued sgd"}) {
    SCOPED_TRACE(name);
    auto ma = net(false), mb = net(false);
    SGDOptions so;
    so.momentum = 0;  // no state made by the first step: the second step is captured
    std::unique_ptr<Optimizer> oa, ob;
    if (name == "adamw") {
      oa = std::make_unique<AdamW>(params_of(*ma), AdamWOptions{});
      ob = std::make_unique<AdamW>(params_of(*mb), AdamWOptions{});
      // its moments are made by the first step: a step before, so that the next two share a key
      for (auto [m, o] : std::vector<std::pair<Module*, Optimizer*>>{{ma.get(), oa.get()}, {mb.get(), ob.get()}}) {
        StepSetup s0 = make_step_setup(StepOptions{}, Device::cpu(), *o);
        s0.read_loss = false;
        train_step(*m, *o, b, s0);
      }
    } else {
      oa = std::make_unique<SGD>(params_of(*ma), so);
      if (name == "host-valued sgd") ob = std::make_unique<HostValuedSgd>(params_of(*mb), so);
      else ob = std::make_unique<SGD>(params_of(*mb), so);
    }
    StepSetup sa = make_step_setup(StepOptions{}, Device::cpu(), *oa), sb = make_step_setup(StepOptions{}, Device::cpu(), *ob);
    sa.read_loss = sb.read_loss = false;
    if (name == "sgd clipped") sa.clip_grad_norm = sb.clip_grad_norm = 0.01;  // clips
    sb.graph = std::make_shared<StepGraph>(GraphMode::automatic, 1);
    std::vector<std::string> lines;
    sb.graph->log = [&](const std::string& l) { lines.push_back(l); };
    for (int i = 0; i < 2; ++i) {  // eager, then captured (the stand-in runs it at once)
      oa->set_lr(0.1 / (i + 1));
      ob->set_lr(0.1 / (i + 1));
      EXPECT_TRUE(train_step(*ma, *oa, b, sa).stepped);
      EXPECT_TRUE(train_step(*mb, *ob, b, sb).stepped);
    }
    ASSERT_EQ(sb.graph->counts().captures, 1);
    EXPECT_EQ(weights(*mb), weights(*ma));
    const std::vector<double> before = weights(*mb);
    EXPECT_TRUE(train_step(*mb, *ob, b, sb).stepped);  // a stand-in replay
    EXPECT_EQ(sb.graph->counts().replays, 2);
    if (name != "host-valued sgd") {
      EXPECT_TRUE(sb.graph->update_captured());
      EXPECT_EQ(weights(*mb), before) << "the update ran outside the captured work";
      EXPECT_TRUE(lines.size() == 1 && lines[0].find("captured the step") != std::string::npos);
    } else {
      EXPECT_FALSE(sb.graph->update_captured());
      EXPECT_NE(weights(*mb), before) << "the eager update after the replay did not run";
      ASSERT_GE(lines.size(), 1u);
      EXPECT_NE(lines[0].find("the update runs eagerly after each replay: stand-in"), std::string::npos) << lines[0];
    }
    if (name == "adamw") {  // 1 + 2 steps before, the captured step counted at its replay, 1 replay
      for (const auto& [k, v] : ob->state_dict().scalars) EXPECT_EQ(v, 4.0) << k;
    }
  }
}
