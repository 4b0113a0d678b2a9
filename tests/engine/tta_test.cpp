// Flip TTA (tools/deploy/tta.h) and MixUp/CutMix in the trainer: eval_scores on a model whose output on the
// mirrored image is known; TTA off is the plain forward, bit for bit; train.tta and kiln eval's
// tta= on a tiny run; training with train.mixup resumes exactly and composes with label smoothing
// and class weights; bad values name the key and what is accepted.
#include <gtest/gtest.h>

#include "../expect_error.h"
#include "../resume_util.h"
#include "../tiny_net.h"

#include <cmath>
#include <filesystem>

#include "core/autograd.h"
#include "core/io/safetensors.h"
#include "tools/deploy/config.h"
#include "tools/engine/trainer.h"
#include "tools/deploy/tta.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

// logits (N, 3) = [x(n, 0, 0, 0), x(n, 0, W-1, 0), 0]: mirroring swaps the first two.
class CornerModel : public Module {
 public:
  CornerModel() : Module("corner") {}
  Tensor forward(const Tensor& x) override {
    std::vector<double> v = x.to(DType::f32).to_double_vector();
    const int64_t N = x.size(0), H = x.size(1), W = x.size(2), C = x.size(3);
    std::vector<double> out;
    for (int64_t n = 0; n < N; ++n) {
      out.push_back(v[n * H * W * C]);
      out.push_back(v[n * H * W * C + (W - 1) * C]);
      out.push_back(0.0);
    }
    (void)H;
    return Tensor::from_vector(out, {N, 3}, DType::f64).to(DType::f32);
  }
  json to_json() const override { return json{{"name", "corner"}}; }
};

std::string fresh_dir(const std::string& name) {
  std::string d = ::testing::TempDir() + "kiln_tta_" + name;
  fs::remove_all(d);
  return d;
}

// The tiny problem of trainer_test.cpp (without dropout and augmentation).
json tiny_config(const std::string& runs) {
  json c = json::parse(R"({
    "name": "tiny",
    "model": {},
    "data": {"source": "synthetic", "synthetic": {"size": 192, "height": 8, "width": 8, "channels": 3, "num_classes": 4},
             "batch_size": 32, "workers": 2},
    "optim": {"name": "sgd", "lr": 0.1, "momentum": 0.9},
    "schedule": {"name": "cosine", "warmup_epochs": 0.5},
    "train": {"epochs": 2, "seed": 3, "plots": false}
  })");
  c["model"]["layers"] = kiln::testing::tiny_conv_layers();
  c["train"]["runs_dir"] = runs;
  return c;
}

using kiln::testing::error_of;

}  // namespace

TEST(FlipTta, AveragesTheSoftmaxOfImageAndMirror) {
  CornerModel m;
  const int64_t N = 2, H = 2, W = 3, C = 1;
  std::vector<double> px{2.0, 0, -1.0, 0, 0, 0,    // image 0: left 2, right -1
                         0.5, 0, 3.0, 0, 0, 0};    // image 1: left 0.5, right 3
  Tensor x = Tensor::from_vector(px, {N, H, W, C}, DType::f32);
  Tensor plain = eval_scores(m, x, Device::cpu(), DType::f32, "none");
  EXPECT_EQ(plain.to_double_vector(), m.forward(x).to_double_vector());  // TTA off: the logits themselves
  Tensor tta = eval_scores(m, x, Device::cpu(), DType::f32, "flip");
  std::vector<double> got = tta.to_double_vector();
  for (int64_t n = 0; n < N; ++n) {
    double l = px[n * 6], r = px[n * 6 + 2];
    auto sm = [](double a, double b, double c, int k) {
      double z[3] = {a, b, c}, s = std::exp(a) + std::exp(b) + std::exp(c);
      return std::exp(z[k]) / s;
    };
    for (int k = 0; k < 3; ++k) {
      double want = 0.5 * (sm(l, r, 0, k) + sm(r, l, 0, k));  // the mirror swaps left and right
      EXPECT_NEAR(std::exp(got[n * 3 + k]), want, 1e-6) << n << " " << k;
    }
  }
  // The averaged prediction is symmetric: classes 0 and 1 tie, whatever the image.
  EXPECT_NEAR(got[0], got[1], 1e-6);
  EXPECT_THROW(eval_scores(m, x, Device::cpu(), DType::f32, "hflip"), Error);
}

TEST(FlipTta, TrainAndEvalUseIt) {
  std::string runs = fresh_dir("eval");
  json cfg = tiny_config(runs);
  TrainResult plain = train(cfg, true);
  json cfg_tta = tiny_config(runs);
  cfg_tta["name"] = "tiny_tta";
  cfg_tta["train"]["tta"] = "flip";
  TrainResult with_tta = train(cfg_tta, true);
  // Same training (TTA only changes the final evaluation): same weights.
  auto wa = load_safetensors(plain.run_dir + "/last.safetensors").tensors;
  auto wb = load_safetensors(with_tta.run_dir + "/last.safetensors").tensors;
  for (auto& [name, t] : wa) EXPECT_EQ(t.to_double_vector(), wb.at(name).to_double_vector()) << name;
  // kiln eval without TTA gives the training's final numbers exactly; with TTA the TTA run's.
  EvalResult e0 = evaluate(cfg, plain.run_dir + "/last.safetensors");
  EXPECT_EQ(e0.top1, plain.val_top1);
  EXPECT_EQ(e0.loss, plain.val_loss);
  json eval_cfg = cfg;
  apply_overrides(eval_cfg, {"train.tta=flip"});
  EvalResult e1 = evaluate(eval_cfg, plain.run_dir + "/last.safetensors");
  EXPECT_DOUBLE_EQ(e1.top1, with_tta.val_top1);
  EXPECT_DOUBLE_EQ(e1.loss, with_tta.val_loss);
  EXPECT_NE(e1.loss, e0.loss);
  int64_t total = 0;
  for (auto& row : e1.confusion)
    for (int64_t v : row) total += v;
  EXPECT_EQ(total, e1.samples);
  EXPECT_TRUE(fs::exists(with_tta.run_dir + "/report.csv"));
}

TEST(FlipTta, TheEmaWeightsGetTheFinalPassToo) {
  // train.ema + train.tta: the result's EMA figures are the EMA weights' evaluation with TTA, which
  // kiln eval of the saved EMA weights reproduces.
  json cfg = tiny_config(fresh_dir("ema"));
  cfg["name"] = "tiny_ema_tta";
  cfg["train"]["ema"] = json{{"decay", 0.9}};
  cfg["train"]["tta"] = "flip";
  TrainResult r = train(cfg, true);
  ASSERT_GT(r.ema_val_top1, 0);
  EvalResult e = evaluate(cfg, r.run_dir + "/last.ema.safetensors");
  EXPECT_DOUBLE_EQ(e.top1, r.ema_val_top1);
  EXPECT_DOUBLE_EQ(e.loss, r.ema_val_loss);
  json plain = cfg;
  apply_overrides(plain, {"train.tta=none"});
  EXPECT_NE(evaluate(plain, r.run_dir + "/last.ema.safetensors").loss, r.ema_val_loss);
}

TEST(FlipTta, BadValueNamesKeyAndChoices) {
  json cfg = tiny_config(fresh_dir("bad"));
  cfg["train"]["tta"] = "hflip";
  std::string e = error_of([&] { train(cfg, true); });
  EXPECT_NE(e.find("train.tta"), std::string::npos) << e;
  EXPECT_NE(e.find("none"), std::string::npos) << e;
  EXPECT_NE(e.find("flip"), std::string::npos) << e;
  json m = tiny_config(fresh_dir("bad"));
  m["train"]["mixup"] = json{{"mixup_alpha", -1}};
  e = error_of([&] { train(m, true); });
  EXPECT_NE(e.find("train.mixup.mixup_alpha"), std::string::npos) << e;
  m["train"]["mixup"] = json{{"prob", 2}};
  e = error_of([&] { train(m, true); });
  EXPECT_NE(e.find("train.mixup.prob"), std::string::npos) << e;
}

TEST(MixupTraining, ResumesExactlyWithSmoothingAndClassWeights) {
  std::string runs = fresh_dir("mixup");
  auto config = [&](const std::string& name) {
    json c = tiny_config(runs);
    c["name"] = name;
    c["train"]["mixup"] = json{{"mixup_alpha", 0.8}, {"cutmix_alpha", 1.0}, {"prob", 1.0}, {"switch_prob", 0.5}};
    c["train"]["label_smoothing"] = 0.1;
    c["train"]["class_weights"] = json::array({1.0, 2.0, 0.5, 1.0});
    return c;
  };
  const auto [a, b2] = kiln::testing::train_straight_and_resumed(config);
  EXPECT_TRUE(std::isfinite(a.train_loss));
  kiln::testing::expect_same_tensors(a.run_dir, b2.run_dir, "last.safetensors");
  auto wa = load_safetensors(a.run_dir + "/last.safetensors").tensors;
  // Mixing changes training: the weights differ from a run without it.
  json off = config("off");
  off["train"].erase("mixup");
  TrainResult c = train(off, true);
  auto wc = load_safetensors(c.run_dir + "/last.safetensors").tensors;
  EXPECT_NE(wa.begin()->second.to_double_vector(), wc.at(wa.begin()->first).to_double_vector());
}
