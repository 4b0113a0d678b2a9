// Your own model and your own training loop with kiln, as a libtorch user writes them
// (docs/library.md, "Your own loop"): a small CNN written as a Module subclass, trained on
// Fashion-MNIST by a hand-written loop, evaluated on the test images, saved in PyTorch's layout and
// reloaded into a fresh model, which must agree with the trained one on every prediction (the
// program exits non-zero if it does not).
//
//   custom_loop [data=DIR] [epochs=N] [steps=N] [eval=N] [out=FILE]
//     data    the IDX files (default /usr/share/datasets/fashion-mnist, Debian's dataset-fashion-mnist)
//     epochs  passes over the 60000 training images (default 1)
//     steps   stop after this many steps in all; 0 = no limit (default 0)
//     eval    test images to evaluate, the first N; 0 = all 10000 (default 0)
//     out     the weights file written, PyTorch's layout (default fashion_cnn.safetensors)
//
// Built against the installed package by examples/CMakeLists.txt; tests/install/install_test.sh
// runs it for a few steps. tools/bench/libtorch/ holds the same program written with libtorch.
#include <kiln/kiln.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace {

// conv-bn-relu-pool twice, then two linear layers: 28x28x1 -> 10 scores.
// Activations are NHWC: x is (N, 28, 28, 1).
class FashionCnn : public kiln::Module {
 public:
  FashionCnn() : Module("FashionCnn") {
    conv1 = register_module("conv1", std::make_shared<kiln::Conv2d>(kiln::Conv2dOptions{
                                         .in_channels = 1, .out_channels = 32, .kernel_size = 3, .padding = 1}));
    bn1 = register_module("bn1", std::make_shared<kiln::BatchNorm2d>(kiln::BatchNormOptions{.num_features = 32}));
    conv2 = register_module("conv2", std::make_shared<kiln::Conv2d>(kiln::Conv2dOptions{
                                         .in_channels = 32, .out_channels = 64, .kernel_size = 3, .padding = 1}));
    bn2 = register_module("bn2", std::make_shared<kiln::BatchNorm2d>(kiln::BatchNormOptions{.num_features = 64}));
    pool = register_module("pool", std::make_shared<kiln::MaxPool2d>(kiln::Pool2dOptions{.kernel_size = 2}));
    // (N, H, W, C) -> (N, C*H*W) in PyTorch's (c, h, w) order, so fc1's weight is torch.nn.Linear's too.
    flatten = register_module("flatten", std::make_shared<kiln::Flatten>());
    fc1 = register_module("fc1", std::make_shared<kiln::Linear>(kiln::LinearOptions{.in_features = 64 * 7 * 7, .out_features = 128}));
    fc2 = register_module("fc2", std::make_shared<kiln::Linear>(kiln::LinearOptions{.in_features = 128, .out_features = 10}));
  }

  kiln::Tensor forward(const kiln::Tensor& x) override {
    kiln::Tensor h = (*pool)(kiln::ops::relu((*bn1)((*conv1)(x))));  // (N, 14, 14, 32)
    h = (*pool)(kiln::ops::relu((*bn2)((*conv2)(h))));                 // (N, 7, 7, 64)
    h = kiln::ops::relu((*fc1)((*flatten)(h)));                         // (N, 128)
    return (*fc2)(h);                                                   // (N, 10) scores
  }

  std::shared_ptr<kiln::Conv2d> conv1, conv2;
  std::shared_ptr<kiln::BatchNorm2d> bn1, bn2;
  std::shared_ptr<kiln::MaxPool2d> pool;
  std::shared_ptr<kiln::Flatten> flatten;
  std::shared_ptr<kiln::Linear> fc1, fc2;
};

struct Args {
  std::string data = "/usr/share/datasets/fashion-mnist";
  int64_t epochs = 1, steps = 0, eval = 0;
  std::string out = "fashion_cnn.safetensors";
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    const size_t eq = s.find('=');
    const std::string key = s.substr(0, eq), value = eq == std::string::npos ? "" : s.substr(eq + 1);
    if (key == "data") a.data = value;
    else if (key == "out") a.out = value;
    else if (key == "epochs") a.epochs = std::stoll(value);
    else if (key == "steps") a.steps = std::stoll(value);
    else if (key == "eval") a.eval = std::stoll(value);
    else throw kiln::Error("unknown argument '" + s + "'; accepted: data=DIR epochs=N steps=N eval=N out=FILE");
  }
  return a;
}

// Fashion-MNIST's mean and standard deviation of the pixels scaled to [0, 1].
kiln::Pipeline normalized() { return kiln::Pipeline().set_normalize({.mean = {0.2860}, .std = {0.3530}}); }

// One pass over the training images (at most `max_steps` steps; 0 = all); returns the steps taken.
int64_t train_one_epoch(FashionCnn& model, kiln::DataLoader& loader, kiln::Optimizer& optimizer, int64_t epoch,
                        int64_t max_steps) {
  model.train();
  loader.start_epoch(epoch);
  kiln::Batch batch;
  int64_t step = 0;
  while ((max_steps == 0 || step < max_steps) && loader.next(batch)) {
    optimizer.zero_grad();
    kiln::Tensor loss = kiln::ops::cross_entropy(model(batch.images), batch.labels);
    loss.backward();
    optimizer.step();
    if (++step % 100 == 0) std::printf("epoch %lld step %lld loss %.4f\n", (long long)epoch + 1, (long long)step, loss.item());
  }
  return step;
}

// The predicted class of each of the first `limit` images the loader gives (0 = all).
std::vector<int64_t> predict(FashionCnn& model, kiln::DataLoader& loader, int64_t limit, std::vector<int64_t>* labels) {
  model.eval();
  kiln::NoGradGuard no_grad;
  loader.start_epoch(0);
  std::vector<int64_t> out;
  kiln::Batch batch;
  while ((limit == 0 || (int64_t)out.size() < limit) && loader.next(batch)) {
    for (int64_t p : kiln::ops::argmax(model(batch.images), 1).to_int_vector()) out.push_back(p);
    if (labels)
      for (int64_t y : batch.labels.to_int_vector()) labels->push_back(y);
  }
  if (limit > 0 && (int64_t)out.size() > limit) out.resize(limit);
  if (labels && limit > 0 && (int64_t)labels->size() > limit) labels->resize(limit);
  return out;
}

int run(const Args& args) {
  kiln::manual_seed(0);
  auto train_set = kiln::IdxDataset::open(args.data, kiln::Split::train, "fashion_mnist");
  auto test_set = kiln::IdxDataset::open(args.data, kiln::Split::val, "fashion_mnist");
  kiln::DataLoader train_loader(train_set, normalized(), {.batch_size = 64, .shuffle = true, .workers = 2});
  kiln::DataLoader test_loader(test_set, normalized(), {.batch_size = 256, .shuffle = false, .workers = 2});

  auto model = std::make_shared<FashionCnn>();
  kiln::SGD optimizer(model->parameters(), {.lr = 0.05, .momentum = 0.9});

  const auto start = std::chrono::steady_clock::now();
  int64_t steps = 0;
  for (int64_t epoch = 0; epoch < args.epochs && (args.steps == 0 || steps < args.steps); ++epoch)
    steps += train_one_epoch(*model, train_loader, optimizer, epoch, args.steps == 0 ? 0 : args.steps - steps);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("trained %lld steps of 64 images in %.2f s: %.1f steps/s\n", (long long)steps, seconds, steps / seconds);

  std::vector<int64_t> labels;
  const std::vector<int64_t> predicted = predict(*model, test_loader, args.eval, &labels);
  int64_t correct = 0;
  for (size_t i = 0; i < predicted.size(); ++i) correct += predicted[i] == labels[i];
  std::printf("test accuracy %.2f%% (%zu images)\n", 100.0 * correct / predicted.size(), predicted.size());

  // PyTorch reads this file: model.load_state_dict(safetensors.torch.load_file(path)).
  kiln::save_weights(*model, args.out, kiln::WeightLayout::pytorch);
  kiln::manual_seed(1);  // a fresh model with other weights, then the file's
  auto reloaded = std::make_shared<FashionCnn>();
  kiln::load_weights(*reloaded, args.out, kiln::WeightLayout::pytorch);
  const std::vector<int64_t> again = predict(*reloaded, test_loader, args.eval, nullptr);
  int64_t agree = 0;
  for (size_t i = 0; i < predicted.size(); ++i) agree += predicted[i] == again[i];
  std::printf("saved %s (PyTorch layout); the reloaded model agrees on %lld of %zu predictions\n", args.out.c_str(),
              (long long)agree, predicted.size());
  return agree == (int64_t)predicted.size() && again.size() == predicted.size() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {  // kiln::Error names the file, key or tensor at fault
    std::fprintf(stderr, "custom_loop: %s\n", e.what());
    return 1;
  }
}
