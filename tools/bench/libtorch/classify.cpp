// examples/classify.cpp written with libtorch, for the comparison in docs/library.md ("kiln and
// libtorch"): the top-5 classes of images, by name. What libtorch cannot do that kiln's Predictor does
// is given by hand here: the model is a TorchScript file made in Python (torch.jit.trace or script;
// libtorch cannot build a model from a config or read safetensors), the class names come from a text
// file, and the preprocessing the training used (decode, grey or colour, resize, center crop,
// normalize) is repeated here with OpenCV (libtorch decodes no images).
//
//   classify_torch MODEL.pt CLASSES.txt SIZE MEAN STD IMAGE...   e.g. classify_torch cnn.pt classes.txt 28 0.286 0.353 shoe.png
// SIZE: the square input the model takes; MEAN/STD: one value for every channel; one channel when the
// model was traced on one (the first input of MODEL.pt's forward is not inspectable, so grey images are
// assumed when CLASSES.txt's first line is "grey", else BGR->RGB).
#include <torch/script.h>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: classify_torch MODEL.pt CLASSES.txt SIZE MEAN STD IMAGE...\n");
    return 2;
  }
  try {
    torch::jit::Module model = torch::jit::load(argv[1]);
    model.eval();
    std::ifstream in(argv[2]);
    std::vector<std::string> names;
    for (std::string line; std::getline(in, line);) names.push_back(line);
    const bool grey = !names.empty() && names[0] == "grey";
    if (grey) names.erase(names.begin());
    const int size = std::stoi(argv[3]);
    const float mean = std::stof(argv[4]), stdev = std::stof(argv[5]);
    int failed = 0;
    for (int i = 6; i < argc; ++i) {
      cv::Mat img = cv::imread(argv[i], grey ? cv::IMREAD_GRAYSCALE : cv::IMREAD_COLOR);
      if (img.empty()) {
        std::fprintf(stderr, "classify_torch: %s: cannot decode\n", argv[i]);
        ++failed;
        continue;
      }
      if (!grey) cv::cvtColor(img, img, cv::COLOR_BGR2RGB);
      // resize the short side to SIZE, then the center SIZE x SIZE
      const double scale = static_cast<double>(size) / std::min(img.rows, img.cols);
      cv::resize(img, img, cv::Size(), scale, scale, cv::INTER_LINEAR);
      img = img(cv::Rect((img.cols - size) / 2, (img.rows - size) / 2, size, size)).clone();
      img.convertTo(img, CV_32F, 1.0 / 255);
      torch::Tensor x = torch::from_blob(img.data, {1, size, size, img.channels()}, torch::kFloat32).permute({0, 3, 1, 2});
      x = (x - mean) / stdev;
      torch::NoGradGuard no_grad;
      const torch::Tensor prob = torch::softmax(model.forward({x}).toTensor(), 1)[0];
      const auto [p, idx] = prob.topk(std::min<int64_t>(5, prob.size(0)));
      if (argc > 7) std::printf("%s\n", argv[i]);
      for (int64_t r = 0; r < p.size(0); ++r) {
        const int64_t c = idx[r].item<int64_t>();
        std::printf("%s %.6f\n", c < static_cast<int64_t>(names.size()) ? names[c].c_str() : std::to_string(c).c_str(),
                    p[r].item<float>());
      }
    }
    return failed > 0 ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "classify_torch: error: %s\n", e.what());
    return 1;
  }
}
