// What the optimizers tell a captured training step (tools/engine/cuda_graph.h) and what changes for
// it, on the CPU, where the per-step values stay the host's:
//  - capture_refusal(): SGD, LARS and AdamW read their per-step values on the device ("");
//  - write_step_values() and set_values_written_outside() (with note_replayed_step() after, as a
//    graph's launch does) change nothing on the CPU: steps with them equal steps without, bit for
//    bit, with a learning rate changing every step;
//  - while values are written outside (a capture under way), a step that would make state (SGD's,
//    LARS's momentum buffers, AdamW's moments at a parameter's first step) is an error naming it, so that
//    the capture fails and the step runs eagerly instead of keeping a buffer of the abandoned capture;
//  - capture_identity(): equal while the state stays where it is (steps, set_lr), different after
//    load_state_dict() (new buffers) and set_lr_mult();
//  - AdamW's step counts ("<param>.step"): a step inside a capture does not count (a failed capture
//    leaves them), note_replayed_step() counts each replay for the parameters the captured step
//    updated; the counts through a state_dict round trip after steps.
#include <gtest/gtest.h>

#include "core/check.h"
#include "optim/adamw.h"
#include "optim/lars.h"
#include "optim/sgd.h"
#include "optim_test_util.h"

using namespace kiln;
using kiln::testing::make_param;
using kiln::testing::set_grad;
using kiln::testing::values;

namespace {

std::unique_ptr<Optimizer> make(const std::string& name, std::vector<ParamRef> ps) {
  if (name == "sgd") {
    SGDOptions o;
    o.momentum = 0.9;
    o.nesterov = true;
    return std::make_unique<SGD>(ps, o);
  }
  if (name == "lars") return std::make_unique<LARS>(ps, LARSOptions{});
  return std::make_unique<AdamW>(ps, AdamWOptions{});
}

}  // namespace

TEST(CaptureValues, EveryOptimizerReadsItsPerStepValuesOnTheDevice) {
  auto p = make_param("w", {1.0f, -2.0f});
  for (const char* name : {"sgd", "lars", "adamw"}) EXPECT_EQ(make(name, {p})->capture_refusal(), "") << name;
}

TEST(CaptureValues, OnTheCpuWritingValuesOutsideChangesNothing) {
  for (const char* name : {"sgd", "lars", "adamw"}) {
    SCOPED_TRACE(name);
    auto pa = make_param("layer.weight", {1.0f, -2.0f, 0.5f, 3.0f}, {2, 2});
    auto pb = make_param("layer.weight", {1.0f, -2.0f, 0.5f, 3.0f}, {2, 2});
    auto oa = make(name, {pa}), ob = make(name, {pb});
    for (int i = 0; i < 5; ++i) {
      const double lr = 0.1 / (1 + i);  // a schedule: another rate each step
      oa->set_lr(lr);
      ob->set_lr(lr);
      const std::vector<float> g = {0.5f - 0.1f * i, 0.25f, -0.75f, 0.125f * i};
      set_grad(pa, g);
      set_grad(pb, g);
      oa->step();
      ob->write_step_values();  // nothing on the CPU
      if (i > 0) ob->set_values_written_outside(true);  // after the first step: the state exists
      ob->step();
      if (i > 0) {
        ob->set_values_written_outside(false);
        ob->note_replayed_step();  // as the graph does after its launch (AdamW counts the step then)
      }
      EXPECT_EQ(values(pb), values(pa)) << "step " << i;
    }
  }
}

TEST(CaptureValues, AFirstStepInsideACaptureIsAnErrorNamingTheParameter) {
  for (const char* name : {"sgd", "lars", "adamw"}) {
    SCOPED_TRACE(name);
    auto p = make_param("fc.weight", {1.0f, -2.0f});
    auto opt = make(name, {p});
    set_grad(p, {0.5f, 0.25f});
    opt->set_values_written_outside(true);
    try {
      opt->step();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("'fc.weight'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("cannot be captured"), std::string::npos) << e.what();
    }
    EXPECT_EQ(values(p), (std::vector<float>{1.0f, -2.0f}));  // nothing changed
    EXPECT_TRUE(opt->state_dict().tensors.empty()) << "a buffer was made inside the capture";
    opt->set_values_written_outside(false);
    opt->step();  // the eager step makes it
    EXPECT_FALSE(opt->state_dict().tensors.empty());
  }
}

TEST(CaptureValues, TheIdentityFollowsTheStateAndLrMultNotTheSteps) {
  for (const char* name : {"sgd", "lars", "adamw"}) {
    SCOPED_TRACE(name);
    auto p = make_param("fc.weight", {1.0f, -2.0f});
    auto opt = make(name, {p});
    const uint64_t none = opt->capture_identity();
    set_grad(p, {0.5f, 0.25f});
    opt->step();
    const uint64_t one = opt->capture_identity();
    EXPECT_NE(one, none);  // the momentum buffer is made by the first step
    opt->set_lr(0.01);
    opt->step();
    EXPECT_EQ(opt->capture_identity(), one);
    opt->load_state_dict(opt->state_dict());
    const uint64_t loaded = opt->capture_identity();
    EXPECT_NE(loaded, one);
    opt->set_lr_mult({{"fc", 0.5}}, "optim.lr_mult");
    EXPECT_NE(opt->capture_identity(), loaded);
  }
}

TEST(CaptureValues, AdamWStepCountsRoundTripThroughTheStateDict) {
  auto p = make_param("fc.weight", {1.0f, -2.0f});
  auto q = make_param("fc.bias", {0.5f});
  AdamW a({p, q}, AdamWOptions{});
  for (int i = 0; i < 3; ++i) {
    set_grad(p, {0.5f, 0.25f});
    if (i != 1) set_grad(q, {0.1f});
    else {
      Tensor t = q.param;
      t.zero_grad();  // no gradient: its count does not advance
    }
    a.step();
  }
  const OptimizerState s = a.state_dict();
  EXPECT_EQ(s.scalars.at("fc.weight.step"), 3.0);
  EXPECT_EQ(s.scalars.at("fc.bias.step"), 2.0);
  auto p2 = make_param("fc.weight", values(p)), q2 = make_param("fc.bias", values(q));
  AdamW b({p2, q2}, AdamWOptions{});
  b.load_state_dict(s);
  EXPECT_EQ(b.state_dict().scalars, s.scalars);
  // the next step continues the counts: both take step 4 / 3 with equal results
  set_grad(p, {0.5f, 0.25f});
  set_grad(q, {0.1f});
  set_grad(p2, {0.5f, 0.25f});
  set_grad(q2, {0.1f});
  a.step();
  b.step();
  EXPECT_EQ(values(p2), values(p));
  EXPECT_EQ(values(q2), values(q));
}

TEST(CaptureValues, AdamWCountsACapturedStepWhenItsGraphRuns) {
  auto p = make_param("fc.weight", {1.0f, -2.0f});
  auto q = make_param("fc.bias", {0.5f});
  auto pe = make_param("fc.weight", {1.0f, -2.0f});
  auto qe = make_param("fc.bias", {0.5f});
  AdamW a({p, q}, AdamWOptions{}), e({pe, qe}, AdamWOptions{});
  set_grad(p, {0.5f, 0.25f});
  set_grad(q, {0.1f});
  set_grad(pe, {0.5f, 0.25f});
  set_grad(qe, {0.1f});
  a.step();  // eager: makes the moments
  e.step();
  EXPECT_EQ(a.state_dict().scalars.at("fc.weight.step"), 1.0);
  Tensor qt = q.param;
  qt.zero_grad();  // the captured step updates fc.weight only
  a.set_values_written_outside(true);
  a.step();  // "inside a capture": on the CPU it computes at once, with step 2, but counts nothing
  a.set_values_written_outside(false);
  EXPECT_EQ(a.state_dict().scalars.at("fc.weight.step"), 1.0) << "a capture that fails must leave the counts";
  a.note_replayed_step();  // the graph ran: the step counts
  EXPECT_EQ(a.state_dict().scalars.at("fc.weight.step"), 2.0);
  EXPECT_EQ(a.state_dict().scalars.at("fc.bias.step"), 1.0);  // not in the captured step
  Tensor qet = qe.param;
  qet.zero_grad();
  e.step();  // the same step eagerly: the same weights (step 2's bias corrections)
  EXPECT_EQ(values(pe), values(p));
  a.note_replayed_step();  // each replay counts once more
  EXPECT_EQ(a.state_dict().scalars.at("fc.weight.step"), 3.0);
}
