#include "layers/recompute.h"

#include <algorithm>

#include "core/autograd.h"
#include "layers/sequential.h"

namespace kiln {

RecomputePolicy RecomputePolicy::parse(const std::string& s, const std::string& path) {
  RecomputePolicy p;
  if (s == "none") return p;
  if (s == "blocks") {
    p.segment = 1;
    return p;
  }
  const std::string prefix = "every:";
  if (s.rfind(prefix, 0) == 0) {
    std::string k = s.substr(prefix.size());
    bool digits = !k.empty() && k.size() <= 6 && k.find_first_not_of("0123456789") == std::string::npos;
    if (digits && std::stoll(k) >= 1) {
      p.segment = std::stoll(k);
      return p;
    }
  }
  KILN_FAIL("config: ", path, " = \"", s, "\" is not accepted; accepted: \"none\", \"blocks\", \"every:K\" with K >= 1");
}

std::string RecomputePolicy::str() const {
  if (segment == 0) return "none";
  if (segment == 1) return "blocks";
  return "every:" + std::to_string(segment);
}

std::vector<Unit> split_units(const std::vector<std::shared_ptr<Module>>& layers) {
  static const std::vector<std::string> ends = {"max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "basic_block",
                                                "bottleneck", "sequential"};
  std::vector<Unit> units;
  Unit cur;
  for (auto& m : layers) {
    cur.push_back(m);
    if (std::find(ends.begin(), ends.end(), m->type()) != ends.end()) {
      units.push_back(std::move(cur));
      cur.clear();
    }
  }
  if (!cur.empty()) units.push_back(std::move(cur));
  return units;
}

Tensor run_units(const std::vector<Unit>& units, const Tensor& x, const RecomputePolicy& policy) {
  Tensor h = x;
  if (policy.segment == 0 || !grad_enabled()) {
    for (auto& u : units) h = run_layers(u, h);
    return h;
  }
  size_t k = static_cast<size_t>(policy.segment);
  for (size_t i = 0; i < units.size(); i += k) {
    Unit seg;
    for (size_t j = i; j < std::min(units.size(), i + k); ++j) seg.insert(seg.end(), units[j].begin(), units[j].end());
    // The last segment runs normally, as torch.utils.checkpoint_sequential does: backward starts
    // with it, so recomputing it would cost a forward and save no peak memory (its activations
    // would be rebuilt at once, while every earlier segment's input is still held).
    if (i + k >= units.size() && i > 0) {
      h = run_layers(seg, h);
      break;
    }
    // The first call is the forward; any later call is the recomputation in backward.
    auto ran = std::make_shared<bool>(false);
    CheckpointFn fn = [seg, ran](const std::vector<Tensor>& xs) {
      RecomputeScope scope(*ran);
      *ran = true;
      return run_layers(seg, xs[0]);
    };
    h = checkpoint(fn, {h});
  }
  return h;
}

}  // namespace kiln
