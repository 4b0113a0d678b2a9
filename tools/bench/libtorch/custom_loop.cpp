// examples/custom_loop.cpp written with libtorch, for the comparison in docs/library.md ("kiln and
// libtorch"): the same network, loop, optimizer, data and checks, as close as libtorch allows.
// torch::data::datasets::MNIST reads the same IDX files, uncompressed (compare.sh unpacks them).
// Differences it cannot avoid: activations are NCHW; the weights are saved with torch::save (a
// TorchScript archive, not safetensors: libtorch has no safetensors writer), and layouts need no
// choice since PyTorch's is the only one.
//
//   custom_loop_torch [data=DIR] [epochs=N] [steps=N] [eval=N] [out=FILE]   (as examples/custom_loop)
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace {

// conv-bn-relu-pool twice, then two linear layers: 1x28x28 -> 10 scores. x is (N, 1, 28, 28).
struct FashionCnnImpl : torch::nn::Module {
  FashionCnnImpl()
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3).padding(1)))),
        bn1(register_module("bn1", torch::nn::BatchNorm2d(32))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3).padding(1)))),
        bn2(register_module("bn2", torch::nn::BatchNorm2d(64))),
        fc1(register_module("fc1", torch::nn::Linear(64 * 7 * 7, 128))),
        fc2(register_module("fc2", torch::nn::Linear(128, 10))) {}

  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(bn1(conv1(x))), 2);  // (N, 32, 14, 14)
    x = torch::max_pool2d(torch::relu(bn2(conv2(x))), 2);  // (N, 64, 7, 7)
    x = torch::relu(fc1(x.flatten(1)));                     // (N, 128)
    return fc2(x);                                          // (N, 10) scores
  }

  torch::nn::Conv2d conv1, conv2;
  torch::nn::BatchNorm2d bn1, bn2;
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(FashionCnn);

struct Args {
  std::string data = "fashion-mnist";
  int64_t epochs = 1, steps = 0, eval = 0;
  std::string out = "fashion_cnn.pt";
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
    else throw std::runtime_error("unknown argument '" + s + "'; accepted: data=DIR epochs=N steps=N eval=N out=FILE");
  }
  return a;
}

// Fashion-MNIST's mean and standard deviation of the pixels scaled to [0, 1].
auto normalized(const std::string& root, torch::data::datasets::MNIST::Mode mode) {
  return torch::data::datasets::MNIST(root, mode)
      .map(torch::data::transforms::Normalize<>(0.2860, 0.3530))
      .map(torch::data::transforms::Stack<>());
}

template <class Loader>
int64_t train_one_epoch(FashionCnn& model, Loader& loader, torch::optim::Optimizer& optimizer, int64_t epoch,
                        int64_t max_steps) {
  model->train();
  int64_t step = 0;
  for (auto& batch : *loader) {
    if (max_steps != 0 && step >= max_steps) break;
    optimizer.zero_grad();
    torch::Tensor loss = torch::nn::functional::cross_entropy(model(batch.data), batch.target);
    loss.backward();
    optimizer.step();
    if (++step % 100 == 0) std::printf("epoch %lld step %lld loss %.4f\n", (long long)epoch + 1, (long long)step, loss.item<double>());
  }
  return step;
}

// Appends the values of the 1-D integer tensor `t`.
void append(std::vector<int64_t>& out, const torch::Tensor& t) {
  const torch::Tensor v = t.to(torch::kLong).contiguous();
  out.insert(out.end(), v.data_ptr<int64_t>(), v.data_ptr<int64_t>() + v.numel());
}

template <class Loader>
std::vector<int64_t> predict(FashionCnn& model, Loader& loader, int64_t limit, std::vector<int64_t>* labels) {
  model->eval();
  torch::NoGradGuard no_grad;
  std::vector<int64_t> out;
  for (auto& batch : *loader) {
    // NOTE: a libtorch loader must be run to its end before it is iterated again (the reload's
    // predictions use it a second time): the batches past the limit are read and skipped.
    if (limit != 0 && (int64_t)out.size() >= limit) continue;
    append(out, model(batch.data).argmax(1));
    if (labels) append(*labels, batch.target);
  }
  if (limit > 0 && (int64_t)out.size() > limit) out.resize(limit);
  if (labels && limit > 0 && (int64_t)labels->size() > limit) labels->resize(limit);
  return out;
}

int run(const Args& args) {
  torch::manual_seed(0);
  using Mode = torch::data::datasets::MNIST::Mode;
  auto train_loader = torch::data::make_data_loader<torch::data::samplers::RandomSampler>(
      normalized(args.data, Mode::kTrain), torch::data::DataLoaderOptions().batch_size(64).workers(2));
  auto test_loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      normalized(args.data, Mode::kTest), torch::data::DataLoaderOptions().batch_size(256).workers(2));

  FashionCnn model;
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));

  const auto start = std::chrono::steady_clock::now();
  int64_t steps = 0;
  for (int64_t epoch = 0; epoch < args.epochs && (args.steps == 0 || steps < args.steps); ++epoch)
    steps += train_one_epoch(model, train_loader, optimizer, epoch, args.steps == 0 ? 0 : args.steps - steps);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("trained %lld steps of 64 images in %.2f s: %.1f steps/s\n", (long long)steps, seconds, steps / seconds);

  std::vector<int64_t> labels;
  const std::vector<int64_t> predicted = predict(model, test_loader, args.eval, &labels);
  int64_t correct = 0;
  for (size_t i = 0; i < predicted.size(); ++i) correct += predicted[i] == labels[i];
  std::printf("test accuracy %.2f%% (%zu images)\n", 100.0 * correct / predicted.size(), predicted.size());

  torch::save(model, args.out);
  torch::manual_seed(1);  // a fresh model with other weights, then the file's
  FashionCnn reloaded;
  torch::load(reloaded, args.out);
  const std::vector<int64_t> again = predict(reloaded, test_loader, args.eval, nullptr);
  int64_t agree = 0;
  for (size_t i = 0; i < predicted.size(); ++i) agree += predicted[i] == again[i];
  std::printf("saved %s; the reloaded model agrees on %lld of %zu predictions\n", args.out.c_str(), (long long)agree,
              predicted.size());
  return agree == (int64_t)predicted.size() && again.size() == predicted.size() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "custom_loop_torch: %s\n", e.what());
    return 1;
  }
}
