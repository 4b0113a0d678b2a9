// classify: the top-5 classes of one image for a model trained with kiln, through the installed
// library (docs/library.md):
//   classify CONFIG WEIGHTS IMAGE    e.g. classify runs/x/config.json runs/x/last.safetensors cat.png
// prints one "class probability" line per class, most probable first.
#include <algorithm>
#include <cstdio>
#include <exception>

#include <kiln/core/autograd.h>      // NoGradGuard
#include <kiln/core/ops/loss.h>      // softmax
#include <kiln/core/ops/reduce.h>    // topk_indices
#include <kiln/data/image_input.h>   // load_input_image: decode + the config's validation transforms
#include <kiln/tools/deploy/config.h>       // load_config_file
#include <kiln/tools/deploy/model_io.h>     // load_model: build_model + load_weights (.safetensors or a run folder)

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: classify CONFIG WEIGHTS IMAGE\n");
    return 2;
  }
  try {
    kiln::json config = kiln::load_config_file(argv[1]);
    std::shared_ptr<kiln::Module> model = kiln::load_model(config, argv[2]);  // eval mode, CPU
    kiln::Tensor x = kiln::load_input_image(argv[3], kiln::DataConfig::from_json(config["data"], "data"));
    kiln::NoGradGuard no_grad;
    kiln::Tensor p = kiln::ops::softmax(model->forward(x));  // (1, classes), f32
    kiln::Tensor top = kiln::ops::topk_indices(p, std::min<int64_t>(5, p.size(1)));
    for (int64_t i = 0; i < top.size(1); ++i) {
      const int64_t c = top.data<int64_t>()[i];
      std::printf("%lld %.6f\n", static_cast<long long>(c), p.data<float>()[c]);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "classify: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
