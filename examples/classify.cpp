// classify: the top-5 classes of images for a model trained with kiln, by name, through the installed
// library's kiln::Predictor (tools/deploy/predict.h; docs/library.md):
//   classify RUN IMAGE...              e.g. classify runs/fashion_mnist_cnn shoe.png
//   classify CONFIG WEIGHTS IMAGE...   e.g. classify runs/x/config.json runs/x/last.safetensors cat.png
// A run folder gives the class names of its classes.json; a config, those of its data source (else
// numbers). Prints, per image, one "NAME PROBABILITY" line per class, most probable first (the image's
// path first when there are several). Exit 1 when an image could not be classified (named on stderr).
#include <cstdio>
#include <exception>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <kiln/tools/deploy/predict.h>  // Predictor: the model, its classes, decode + validation transforms

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: classify RUN IMAGE...  or  classify CONFIG WEIGHTS IMAGE...\n");
    return 2;
  }
  try {
    // A run folder is a directory; a config file is followed by its weights.
    const bool run = std::filesystem::is_directory(argv[1]);
    kiln::PredictOptions options;
    if (!run) options.weights = argv[2];
    const std::vector<std::string> images(argv + (run ? 2 : 3), argv + argc);
    if (images.empty()) throw std::runtime_error("no IMAGE given");
    kiln::Predictor predictor(argv[1], options);  // the weights a run stands for: its best, else its last
    const std::vector<std::string>& names = predictor.class_names();
    int failed = 0;
    for (const kiln::Prediction& p : predictor.predict(images, /*topk=*/5)) {
      if (!p.ok()) {
        std::fprintf(stderr, "classify: %s\n", p.error.c_str());
        ++failed;
        continue;
      }
      if (images.size() > 1) std::printf("%s\n", p.path.c_str());
      for (size_t r = 0; r < p.index.size(); ++r)
        std::printf("%s %.6f\n", names[static_cast<size_t>(p.index[r])].c_str(), p.prob[r]);
    }
    return failed > 0 ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "classify: error: %s\n", e.what());
    return 1;
  }
}
