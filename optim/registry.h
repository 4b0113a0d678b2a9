// The optimizer and learning-rate schedule registries (core/registry.h): optim.name and schedule.name.
// kiln's own (sgd, adamw, lars; constant, step, multistep, cosine, poly) are one line each in
// registry.cpp; a program adds its own with register_optimizer() / register_schedule() (or KILN_REGISTER),
// and a config then names them like kiln's own (docs/library.md). make_optimizer() and make_schedule()
// (optim/optimizer.h, optim/lr_schedule.h) build through them. Tests: tests/optim/optim_registry_test.cpp.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/registry.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"

namespace kiln {

// Builds an optimizer over `params` from its options object (with "name"; "lr_mult" is taken out and
// applied by make_optimizer for every optimizer); `path` names it in errors ("optim").
using OptimizerMaker =
    std::function<std::unique_ptr<Optimizer>(const json& options, std::vector<ParamRef> params, const std::string& path)>;
// Builds a schedule from its options object (with "name") and the run's context; `path`: "schedule".
using ScheduleMaker =
    std::function<std::unique_ptr<LrSchedule>(const json& options, const ScheduleContext& context, const std::string& path)>;

Registry<OptimizerMaker>& optimizer_registry();
Registry<ScheduleMaker>& schedule_registry();
// Add a name; each throws if it is taken (naming both places). `docs`: what `--help` says of it.
void register_optimizer(const std::string& name, OptimizerMaker make, ComponentDocs docs = {},
                        const SourcePlace& where = SourcePlace::current());
void register_schedule(const std::string& name, ScheduleMaker make, ComponentDocs docs = {},
                       const SourcePlace& where = SourcePlace::current());

}  // namespace kiln
