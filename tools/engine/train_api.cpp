// kiln::train(config, overrides): `kiln train` as a library call (train_api.h).
#include "tools/engine/train_api.h"

#include <algorithm>
#include <filesystem>
#include <optional>

#include "core/registry.h"
#include "core/version.h"
#include "tools/deploy/checkpoint.h"
#include "tools/deploy/config.h"
#include "tools/deploy/model_io.h"
#include "tools/engine/interrupt.h"

namespace fs = std::filesystem;

namespace kiln {

json load_config_with(const std::string& config_or_run, const std::vector<std::string>& overrides,
                      const std::string& command) {
  json config = load_config_file(resolve_run_or_config(command, config_or_run).config_file);
  // A run's config.json from a kiln that recorded the keys of one invocation (train.stop_after): they
  // are not the run's, and a resume continues it (tools/engine/run_history.h).
  if (is_run_folder(config_or_run) && config.is_object() && config.contains("train") && config["train"].is_object())
    config["train"].erase("stop_after");
  apply_overrides(config, overrides);
  return config;
}

namespace {
bool is_resume_key(const std::string& arg) {
  const std::optional<KeyValue> kv = split_key_value(arg);
  return kv && (kv->key == "resume" || kv->key == "train.resume");
}

// A run folder of another kiln (a key this one does not know, one it lacks): said before anything.
void check_run_config(const json& config, const std::string& run, const std::string& command) {
  try {
    check_config(config);
  } catch (const Error& e) {
    const json v = config.value("kiln_version", json());
    KILN_FAIL(command, " ", run, ": its config.json (written by ",
              v.is_string() ? "kiln " + v.get<std::string>() : std::string("a kiln that did not record its version"),
              "; this is kiln ", kiln_version(), ") is not accepted: ", e.what(),
              "; resume it with the kiln that wrote it, or start a new run from a config (kiln train CONFIG)");
  }
}
}  // namespace

json training_config(const json& config, const std::vector<std::string>& overrides, const std::string& command) {
  check_registrations();
  std::vector<std::string> args = overrides;
  if (!config.is_string()) {  // a config built in code
    json c = config;
    apply_overrides(c, args);
    return c;
  }
  std::string first = config.get<std::string>();
  // `resume=RUN|CHECKPOINT` with no config: the run's own (as `kiln train RUN`).
  if (first.empty() || is_resume_key(first)) {
    const std::string value = first.empty() ? "" : split_key_value(first)->value;
    KILN_CHECK(!value.empty(), command, ": give a config file, a run folder or resume=RUN");
    const std::string run =
        is_run_folder(value) ? value : fs::path(resolve_checkpoint(value)).parent_path().string();
    KILN_CHECK(is_run_folder(run), command, " ", first, ": ", run, " is not a run folder (no config.json); give the "
               "config too: kiln train CONFIG ", first);
    args.insert(args.begin(), first);
    first = run;
  }
  const bool run_folder = is_run_folder(first);
  // The run folder's config.json is the config as run; resume= (or train.resume=) given too wins.
  if (run_folder && std::none_of(args.begin(), args.end(), is_resume_key))
    args.push_back("train.resume=" + first);  // the trainer says "resumed ..."
  json c = load_config_with(first, args, command);
  if (run_folder) check_run_config(c, first, command);
  return c;
}

TrainResult train(const json& config, const std::vector<std::string>& overrides, bool quiet) {
  const json c = training_config(config, overrides);
  SignalWatch signals;  // SIGINT/SIGTERM: save and stop; SIGUSR1: save (tools/engine/interrupt.h)
  return train(c, quiet);
}

}  // namespace kiln
