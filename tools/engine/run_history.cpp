// A run folder's history (see run_history.h).
#include "tools/engine/run_history.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <vector>

#include "core/check.h"
#include "core/version.h"
#include "tools/engine/run_lock.h"

namespace kiln {

namespace {

void flatten(const json& v, const std::string& path, std::map<std::string, json>& out) {
  if (v.is_object() && !v.empty()) {
    for (auto it = v.begin(); it != v.end(); ++it) flatten(it.value(), path.empty() ? it.key() : path + "." + it.key(), out);
  } else if (v.is_array() && !v.empty() && (v[0].is_object() || v[0].is_array())) {
    for (size_t i = 0; i < v.size(); ++i) flatten(v[i], path + "." + std::to_string(i), out);
  } else {
    out[path] = v;  // a leaf, or a list of numbers/strings as one value
  }
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// Keys that only tune speed or output, not what is trained: changing them mid-epoch is harmless.
bool harmless_mid_epoch(const std::string& k) {
  for (const char* p : {"data.workers", "data.prefetch", "train.log_every", "train.plots", "train.tensorboard",
                        "train.device", "train.save_every", "train.keep_last", "train.comm_timeout_s", "train.cudnn_benchmark",
                        "train.threads", "train.cuda_graph"})
    if (starts_with(k, p)) return true;
  return false;
}

// What a mid-epoch resume keeps: the epoch's image order and position (the seeds, the batch, the data).
bool shapes_the_epoch(const std::string& k) {
  if (harmless_mid_epoch(k)) return false;
  return starts_with(k, "data.") || k == "train.seed" || k == "train.max_steps_per_epoch" || k == "train.accumulate" ||
         starts_with(k, "train.mixup") || k == "train.reuse_first_batch";
}

}  // namespace

bool invocation_only_key(const std::string& k) {
  return k == "train.resume" || k == "train.stop_after" || k == "kiln_version";
}

std::map<std::string, std::pair<json, json>> changed_keys(const json& before, const json& after) {
  std::map<std::string, json> a, b;
  flatten(before, "", a);
  flatten(after, "", b);
  std::map<std::string, std::pair<json, json>> out;
  for (const auto& [k, v] : a) {
    if (invocation_only_key(k)) continue;
    auto it = b.find(k);
    const json now = it == b.end() ? json() : it->second;
    if (now != v) out[k] = {v, now};
  }
  for (const auto& [k, v] : b)
    if (!invocation_only_key(k) && !a.count(k)) out[k] = {json(), v};
  return out;
}

std::string resume_refusal(const std::map<std::string, std::pair<json, json>>& changed, bool mid_epoch,
                           const std::string& where) {
  if (!mid_epoch) return "";
  std::vector<std::string> bad;
  for (const auto& [k, v] : changed)
    if (shapes_the_epoch(k)) bad.push_back(k + " (" + v.first.dump() + " -> " + v.second.dump() + ")");
  if (bad.empty()) return "";
  std::string names;
  for (const std::string& s : bad) names += (names.empty() ? "" : ", ") + s;
  return "resume: " + where + " was saved mid-epoch, and changing " + names +
         " there would change which images the rest of the epoch sees or where it stands. Resume without "
         "changing it, or finish the epoch first (kiln train RUN with train.stop_after set to the epoch's number), "
         "then change it at the epoch's end";
}

std::string describe_changes(const std::map<std::string, std::pair<json, json>>& changed) {
  std::string out;
  for (const auto& [k, v] : changed) out += "  " + k + ": " + v.first.dump() + " -> " + v.second.dump() + "\n";
  return out;
}

void append_invocation(const std::string& run_dir, json row) {
  row["time"] = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  row["when"] = local_time_text();
  std::ofstream out(run_dir + "/invocations.jsonl", std::ios::app);
  out << row.dump() << "\n";
  out.flush();
  KILN_CHECK(out.good(), "cannot append to ", run_dir, "/invocations.jsonl");
}

std::string invocation_header() {
  return "==== " + local_time_text() + "  kiln " + kiln_version() + "  (" + host_name() + ", PID " +
         std::to_string(::getpid()) + "): " + process_command_line();
}

}  // namespace kiln
