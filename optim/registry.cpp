// The optimizer and schedule registries (optim/registry.h): kiln's own, one line each, added when a
// registry is first used.
#include "optim/registry.h"

#include <functional>
#include <map>
#include <utility>

#include "optim/adamw.h"
#include "optim/lars.h"
#include "optim/lr_schedule.h"
#include "optim/sgd.h"

namespace kiln {

namespace {
ComponentDocs documented_by(const char* options, const char* keys) { return {"", json::object(), {options, keys}, {}}; }
}  // namespace

Registry<OptimizerMaker>& optimizer_registry() {
  static Registry<OptimizerMaker> r = [] {
    Registry<OptimizerMaker> b("an optimizer");
    b.add("sgd", [](const json& j, std::vector<ParamRef> p, const std::string& path) {
      return std::make_unique<SGD>(std::move(p), SGDOptions::from_json(j, path)); }, documented_by("SGDOptions", "OptimKeys"));
    b.add("adamw", [](const json& j, std::vector<ParamRef> p, const std::string& path) {
      return std::make_unique<AdamW>(std::move(p), AdamWOptions::from_json(j, path)); }, documented_by("AdamWOptions", "OptimKeys"));
    b.add("lars", [](const json& j, std::vector<ParamRef> p, const std::string& path) {
      return std::make_unique<LARS>(std::move(p), LARSOptions::from_json(j, path)); }, documented_by("LARSOptions", "OptimKeys"));
    return b;
  }();
  return r;
}

Registry<ScheduleMaker>& schedule_registry() {
  static Registry<ScheduleMaker> r = [] {
    Registry<ScheduleMaker> b("a learning-rate schedule");
    b.add("constant", [](const json& j, const ScheduleContext& c, const std::string& path) {
      return std::make_unique<ConstantLR>(c, ConstantLROptions::from_json(j, path)); }, documented_by("ConstantLROptions", "ScheduleKeys"));
    b.add("step", [](const json& j, const ScheduleContext& c, const std::string& path) {
      return std::make_unique<StepLR>(c, StepLROptions::from_json(j, path)); }, documented_by("StepLROptions", "ScheduleKeys"));
    b.add("multistep", [](const json& j, const ScheduleContext& c, const std::string& path) {
      return std::make_unique<MultiStepLR>(c, MultiStepLROptions::from_json(j, path)); }, documented_by("MultiStepLROptions", "ScheduleKeys"));
    b.add("cosine", [](const json& j, const ScheduleContext& c, const std::string& path) {
      return std::make_unique<CosineLR>(c, CosineLROptions::from_json(j, path)); }, documented_by("CosineLROptions", "ScheduleKeys"));
    b.add("poly", [](const json& j, const ScheduleContext& c, const std::string& path) {
      return std::make_unique<PolyLR>(c, PolyLROptions::from_json(j, path)); }, documented_by("PolyLROptions", "ScheduleKeys"));
    return b;
  }();
  return r;
}

void register_optimizer(const std::string& name, OptimizerMaker make, ComponentDocs docs, const SourcePlace& where) {
  optimizer_registry().add(name, std::move(make), std::move(docs), where);
}
void register_schedule(const std::string& name, ScheduleMaker make, ComponentDocs docs, const SourcePlace& where) {
  schedule_registry().add(name, std::move(make), std::move(docs), where);
}

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
  const OptimizerMaker& make = optimizer_registry().lookup(options, path, "name");
  const std::string name = options["name"].get<std::string>();
  std::unique_ptr<Optimizer> opt = call_component(path, "name", name, optimizer_registry().entry(name)->place,
                                                  [&] { return make(options, std::move(params), path); });
  opt->set_lr_mult(mult, "config: " + mult_path);
  return opt;
}
std::vector<std::string> optimizer_names() { return optimizer_registry().names(); }

std::unique_ptr<LrSchedule> make_schedule(const json& j, const ScheduleContext& context, const std::string& path) {
  const ScheduleMaker& make = schedule_registry().lookup(j, path, "name");
  const std::string name = j["name"].get<std::string>();
  return call_component(path, "name", name, schedule_registry().entry(name)->place, [&] { return make(j, context, path); });
}
std::vector<std::string> schedule_names() { return schedule_registry().names(); }

}  // namespace kiln
