// The trainer's EMA model (tools/engine/train_ema.h).
#include "tools/engine/train_ema.h"

#include "core/rng.h"
#include "layers/init.h"
#include "models/registry.h"

namespace kiln {

std::unique_ptr<TrainingEma> make_training_ema(const EmaOptions& options, const json& model_config, Module& live,
                                               Device device) {
  if (!options.enabled) return nullptr;
  auto out = std::make_unique<TrainingEma>();
  {
    init::SkipInitGuard skip;  // the weights are copied from `live` below
    RngState rng = default_generator().state();
    out->model = models::build_model(model_config, "model");
    default_generator().set_state(rng);
  }
  out->model->to(device);
  std::vector<WeightEma::Entry> entries;
  auto pair_up = [&](const NamedTensors& lv, const NamedTensors& ev, bool params) {
    KILN_CHECK(lv.size() == ev.size(), "EMA: the model has ", lv.size(), " ", params ? "parameters" : "buffers",
               " but its copy has ", ev.size());
    for (size_t i = 0; i < lv.size(); ++i) {
      KILN_CHECK(lv[i].first == ev[i].first, "EMA: tensor ", i, " is '", lv[i].first, "' in the model and '",
                 ev[i].first, "' in its copy");
      const bool average = params && lv[i].second.dtype() == DType::f32;
      entries.push_back({lv[i].first, lv[i].second, ev[i].second, average});
    }
  };
  pair_up(live.named_parameters(), out->model->named_parameters(), true);
  pair_up(live.named_buffers(), out->model->named_buffers(), false);
  out->ema = std::make_unique<WeightEma>(options, std::move(entries));
  out->ema->reset_to_live();
  out->model->train();  // as the live model, so that switching to eval and back behaves alike
  return out;
}

}  // namespace kiln
