// Training from a program's own code: what `kiln train CONFIG|RUN [key=value ...]` does (the same config
// resolution, resume rule, signals and run folder), with the result back (docs/library.md).
//   kiln::TrainResult r = kiln::train("configs/fashion_mnist_cnn.json", {"epochs=3", "name=exp"});
//   kiln::train(config_json, {"train.epochs=3"});          // a config built in code
//   kiln::train("runs/exp", {"epochs=5"});                  // resumes the run (raises its target)
//   r.run_dir, r.val_top1, r.val_top5, r.interrupted, ...   (tools/engine/trainer.h, TrainResult)
// A model, layer, data source, transform, optimizer or schedule the program registered (core/registry.h)
// is named in the config like kiln's own. While the call trains, SIGINT/SIGTERM save the run and stop it
// (TrainResult::interrupted), SIGUSR1 saves, as under `kiln train` (tools/engine/interrupt.h).
// Tests: tests/engine/train_api_test.cpp, examples/engine_model.cpp (tests/install/install_test.sh).
#pragma once
#include <string>
#include <vector>

#include "core/json_reader.h"
#include "tools/engine/trainer.h"

namespace kiln {

// `config`: a config (a JSON object), or a JSON string naming a config file or a run folder (resumed from its
// last checkpoint, as `kiln train RUN`); `overrides`: key=value arguments as on kiln's command line
// ("epochs=3", "optim.lr=0.05", "resume=runs/x"). Errors (a bad key or value, a run folder with a live
// writer) are thrown as kiln::Error naming the input, before anything trains.
TrainResult train(const json& config, const std::vector<std::string>& overrides, bool quiet = false);

// The config that train(config, overrides) trains: the file or run folder read, the overrides applied (a
// run folder: train.resume set to it), checked as the trainer reads it. `command` names the caller in errors.
json training_config(const json& config, const std::vector<std::string>& overrides,
                     const std::string& command = "kiln::train");

// A config file or a run folder's config.json (the config as run) with key=value `overrides` applied;
// `command` names the caller in errors ("kiln eval").
json load_config_with(const std::string& config_or_run, const std::vector<std::string>& overrides,
                      const std::string& command);

}  // namespace kiln
