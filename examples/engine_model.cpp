// Example (b): a model and a transform of your own (my_components.cpp), trained by kiln's whole engine
// from a JSON config, with the result back in your program (docs/library.md, "Your components, kiln's
// engine"):
//   engine_model CONFIG|RUN [key=value ...]       e.g. engine_model tiny_cnn.json epochs=2
// CONFIG starts a run (tiny_cnn.json names "tiny_cnn" and "random_invert"); RUN, a run folder, resumes it
// from its last checkpoint, mid-epoch included. Ctrl-C (SIGINT) saves and stops, exit status 130; then
// `engine_model RUN` continues it exactly where it stopped. The run folder is an ordinary one: your own
// kiln (example c, user_kiln.cpp) predicts, evaluates and exports from it, rebuilding "tiny_cnn" by name.
#include <cstdio>
#include <string>
#include <vector>

#include <kiln/engine.h>  // kiln::train(config, overrides) -> TrainResult

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: engine_model CONFIG|RUN [key=value ...]\n");
    return 2;
  }
  try {
    const std::vector<std::string> overrides(argv + 2, argv + argc);
    const kiln::TrainResult r = kiln::train(kiln::json(argv[1]), overrides);
    if (r.interrupted) return 128 + r.interrupted;  // saved: `engine_model <run>` resumes it
    if (r.run_dir.empty()) return 0;                  // under mpirun, a rank other than the first
    std::printf("engine_model: %s: val top1 %.2f%%, top5 %.2f%%, loss %.4f, %lld steps, %.0f img/s\n", r.run_dir.c_str(),
                100 * r.val_top1, 100 * r.val_top5, r.val_loss, static_cast<long long>(r.steps), r.images_per_s);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "engine_model: error: %s\n", e.what());
    return 1;
  }
}
