// A run folder's history (docs/training.md, "What a run folder records"): runs/<name>/invocations.jsonl
// has one row per `kiln train` that wrote the folder: when it started, the kiln, host and PID, the
// command line, where it resumed and which keys it changed from the run's config as run before it;
// and one row when it ended (finished, stopped by a signal). train.log starts each invocation's part
// with a header line (invocation_header). Resuming prints each changed key with its old and new value;
// the changes a resume cannot honour are refused before anything is written (resume_refusal).
// Tests: tests/engine/run_history_test.cpp, tests/cli/run_lock_test.cpp.
#pragma once
#include <map>
#include <string>
#include <utility>

#include "core/json_reader.h"

namespace kiln {

// The keys whose values differ between two configs as run, by dotted path ("optim.lr"; a list's items
// by index, "data.train_transforms.0.p"), each with its (old, new) value; a key only one of them has
// appears with null on the other side. The keys that shape one invocation only are left out
// (invocation_only_key).
std::map<std::string, std::pair<json, json>> changed_keys(const json& before, const json& after);

// Keys that shape one invocation and are not part of the run: train.resume, train.stop_after, and the
// recorded kiln_version.
bool invocation_only_key(const std::string& dotted);

// The changes a resume from a mid-epoch checkpoint refuses, naming them ("" when none): those that
// would change which images the rest of the epoch sees or where it stands (the seeds, the batch, the
// data and its transforms, train.max_steps_per_epoch). `where` names the checkpoint and its position.
std::string resume_refusal(const std::map<std::string, std::pair<json, json>>& changed, bool mid_epoch,
                           const std::string& where);

// "optim.lr: 0.1 -> 0.02" lines, one a key.
std::string describe_changes(const std::map<std::string, std::pair<json, json>>& changed);

// One row appended to <run_dir>/invocations.jsonl (with "time", unix seconds, and "when", local time).
void append_invocation(const std::string& run_dir, json row);

// This invocation's header line in train.log: "==== 2026-12-07 03:41:07 +0000 kiln 0.1.0 (host, PID 123): kiln train ...".
std::string invocation_header();

}  // namespace kiln
