// Fuzzes the config reader (tools/deploy/config.h) and the option readers the trainer applies to it:
// input = the JSON config file SEP override 1 SEP override 2 ... (fuzz/fuzz_util.h), each
// override a `key=value` argument. The config is loaded from a file, the overrides applied, and each
// section is read as `kiln train` reads it before building anything (train, data, optim,
// schedule); the model section is not built (its widths would allocate weights).
#include <algorithm>
#include <cstdint>

#include "core/check.h"
#include "data/config.h"
#include "fuzz/fuzz_util.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "tools/deploy/config.h"
#include "tools/engine/train_options.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parts = kiln::fuzz::split_parts(data, size);
  std::string path = kiln::fuzz::write_scratch("config.json", parts[0]);
  std::vector<std::string> overrides(parts.begin() + 1, parts.end());
  kiln::json config;
  try {
    config = kiln::load_config_file(path);
    kiln::apply_overrides(config, overrides);
  } catch (const kiln::Error&) {
    return 0;
  }
  if (!config.is_object()) return 0;
  try {
    kiln::TrainOptions t = kiln::TrainOptions::from_json(config.value("train", kiln::json::object()), "train");
    (void)t.to_json().dump();
  } catch (const kiln::Error&) {
  }
  try {
    if (config.contains("data")) {
      kiln::DataConfig d = kiln::DataConfig::from_json(config["data"], "data");
      (void)d.to_json().dump();
      const auto& p = d.progressive_resize;  // the schedule's arithmetic at its edges (data/progressive.h)
      const int64_t full = p.max_size > 0 ? p.max_size : std::max<int64_t>(p.min_size, 28);  // check_fits holds
      for (int64_t e : {int64_t{0}, p.start_epoch, p.end_epoch - 1, p.end_epoch, int64_t{99999}})
        if (p.enabled() && p.size_at(e, full) < 1) __builtin_trap();
    }
  } catch (const kiln::Error&) {
  }
  double lr = 0.1;
  try {
    if (config.contains("optim")) lr = kiln::make_optimizer(config["optim"], {}, "optim")->lr();
  } catch (const kiln::Error&) {
  }
  try {
    if (config.contains("schedule")) {
      kiln::ScheduleContext ctx{lr, 100, 10};
      auto s = kiln::make_schedule(config["schedule"], ctx, "schedule");
      for (int64_t step : {int64_t{0}, int64_t{1}, int64_t{500}, int64_t{999}}) (void)s->lr_at(step);
    }
  } catch (const kiln::Error&) {
  }
  return 0;
}
