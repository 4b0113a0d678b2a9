// The explicit registries that map config names to optimizers and learning-rate schedules: one
// line per type. (No static self-registration: it silently disappears from static libraries.)
#include <functional>
#include <map>
#include <utility>

#include "core/registry.h"
#include "optim/adamw.h"
#include "optim/lars.h"
#include "optim/lr_schedule.h"
#include "optim/sgd.h"

namespace kiln {

namespace {

using OptimizerMaker = std::function<std::unique_ptr<Optimizer>(const json&, std::vector<ParamRef>, const std::string&)>;

const Registry<OptimizerMaker>& optimizer_registry() {
  static const Registry<OptimizerMaker> r("", {
      {"sgd", [](const json& j, std::vector<ParamRef> p, const std::string& path) {
         return std::make_unique<SGD>(std::move(p), SGDOptions::from_json(j, path)); }},
      {"adamw", [](const json& j, std::vector<ParamRef> p, const std::string& path) {
         return std::make_unique<AdamW>(std::move(p), AdamWOptions::from_json(j, path)); }},
      {"lars", [](const json& j, std::vector<ParamRef> p, const std::string& path) {
         return std::make_unique<LARS>(std::move(p), LARSOptions::from_json(j, path)); }},
  });
  return r;
}

using ScheduleMaker = std::function<std::unique_ptr<LrSchedule>(const json&, const ScheduleContext&, const std::string&)>;

const Registry<ScheduleMaker>& schedule_registry() {
  static const Registry<ScheduleMaker> r("", {
      {"constant", [](const json& j, const ScheduleContext& c, const std::string& path) {
         return std::make_unique<ConstantLR>(c, ConstantLROptions::from_json(j, path)); }},
      {"step", [](const json& j, const ScheduleContext& c, const std::string& path) {
         return std::make_unique<StepLR>(c, StepLROptions::from_json(j, path)); }},
      {"multistep", [](const json& j, const ScheduleContext& c, const std::string& path) {
         return std::make_unique<MultiStepLR>(c, MultiStepLROptions::from_json(j, path)); }},
      {"cosine", [](const json& j, const ScheduleContext& c, const std::string& path) {
         return std::make_unique<CosineLR>(c, CosineLROptions::from_json(j, path)); }},
      {"poly", [](const json& j, const ScheduleContext& c, const std::string& path) {
         return std::make_unique<PolyLR>(c, PolyLROptions::from_json(j, path)); }},
  });
  return r;
}

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const json& j, std::vector<ParamRef> params, const std::string& path) {
  // "lr_mult" belongs to every optimizer (the base class); the rest are the named optimizer's options.
  json options = j;
  std::map<std::string, double> mult;
  const std::string mult_path = path.empty() ? "lr_mult" : path + ".lr_mult";
  if (KeyRecorder* rec = KeyRecorder::current()) rec->note({mult_path, "object", json::object(), true, false, ""});
  if (j.is_object() && j.contains("lr_mult")) {
    const json& m = j["lr_mult"];
    KILN_CHECK(m.is_object(), "config: ", mult_path, " = ", m.dump(), " is not accepted; accepted: an object of "
               "parameter-name prefixes and factors, e.g. {\"layer1\": 0.1, \"fc\": 1}");
    for (auto it = m.begin(); it != m.end(); ++it) {
      const std::string& prefix = it.key();
      const json& v = it.value();
      KILN_CHECK(v.is_number() && !prefix.empty(), "config: ", mult_path, ".\"", prefix, "\" = ", v.dump(),
                 " is not accepted; accepted: a non-empty prefix with a number >= 0");
      mult[prefix] = v.get<double>();
    }
    options.erase("lr_mult");
  }
  std::unique_ptr<Optimizer> opt = optimizer_registry().lookup(options, path, "name")(options, std::move(params), path);
  opt->set_lr_mult(mult, "config: " + mult_path);
  return opt;
}
std::vector<std::string> optimizer_names() { return optimizer_registry().names(); }

std::unique_ptr<LrSchedule> make_schedule(const json& j, const ScheduleContext& context, const std::string& path) {
  return schedule_registry().lookup(j, path, "name")(j, context, path);
}
std::vector<std::string> schedule_names() { return schedule_registry().names(); }

}  // namespace kiln
