#include "layers/interop.h"

#include <algorithm>

#include "core/autograd.h"
#include "core/io/safetensors.h"
#include "layers/conv.h"
#include "layers/linear.h"

namespace kiln {

namespace {
enum class Kind { plain, conv_weight };

struct Layout {
  Kind kind = Kind::plain;
};

// How the tensor `name` of `m` is laid out (the module that owns it decides): only conv weights
// differ from PyTorch's layout.
Layout layout_of(Module& m, const std::string& name) {
  size_t dot = name.rfind('.');
  std::string owner = dot == std::string::npos ? "" : name.substr(0, dot);
  std::string leaf = dot == std::string::npos ? name : name.substr(dot + 1);
  if (leaf != "weight") return {};
  Module& mod = owner.empty() ? m : m.submodule(owner);
  if (dynamic_cast<Conv2d*>(&mod)) return {Kind::conv_weight};
  return {};
}

Shape pytorch_shape(const Layout& l, const Shape& s) {
  if (l.kind == Kind::conv_weight) return {s[0], s[3], s[1], s[2]};
  return s;
}

Tensor convert(const Layout& l, const Tensor& t, bool to_pytorch) {
  NoGradGuard ng;
  Tensor x = t.detach().to(Device::cpu());
  switch (l.kind) {
    case Kind::plain: return x.clone();
    case Kind::conv_weight: return x.permute(to_pytorch ? std::vector<int64_t>{0, 3, 1, 2} : std::vector<int64_t>{0, 2, 3, 1}).contiguous();
  }
  return x;
}
}  // namespace

Tensor to_pytorch_layout(Module& m, const std::string& name, const Tensor& t) {
  return convert(layout_of(m, name), t, true);
}

StateDict export_pytorch_state_dict(Module& m) {
  StateDict out;
  for (auto& [name, t] : m.state_dict()) out[name] = to_pytorch_layout(m, name, t);
  return out;
}

namespace {
// Loads `sd` into `m`, its conv weights in PyTorch's layout when `pytorch`, else kiln's; `what` names
// the source in errors.
void load_in_layout(Module& m, const StateDict& sd, bool strict, bool pytorch, const std::string& what) {
  StateDict own = m.state_dict();
  std::vector<std::pair<std::string, Shape>> expected;
  std::map<std::string, Layout> layouts;
  for (auto& [name, t] : own) {
    layouts[name] = pytorch ? layout_of(m, name) : Layout{};
    expected.emplace_back(name, pytorch_shape(layouts[name], t.shape()));
  }
  check_state_dict(expected, sd, strict, what);
  StateDict converted;
  for (auto& [name, t] : sd) {
    auto it = layouts.find(name);
    if (it == layouts.end()) continue;
    // Floating <-> floating converts (an F16 file into f32 parameters); integers never become
    // weights silently, nor weights counters (num_batches_tracked).
    DType want = own.at(name).dtype();
    KILN_CHECK(is_floating(t.dtype()) == is_floating(want), what, ": tensor '", name, "' is ", dtype_name(t.dtype()),
               " but ", name, " of the model is ", dtype_name(want), "; accepted: ",
               is_floating(want) ? "a floating dtype (F32, F16, BF16, F64)" : "an integer dtype (I64, I32, U8)");
    converted[name] = convert(it->second, t, false);
  }
  m.load_state_dict(converted, strict);
}
}  // namespace

void import_pytorch_state_dict(Module& m, const StateDict& sd, bool strict) {
  load_in_layout(m, sd, strict, /*pytorch=*/true, m.type() + " import of a PyTorch state dict");
}

// ---------------------------------------------------------------------------------------------
// Weights files
const char* weight_layout_name(WeightLayout layout) { return layout == WeightLayout::kiln ? "kiln" : "pytorch"; }

namespace {
const char* const kLayoutKey = "kiln.layout";

std::string layout_words(WeightLayout l) {
  return l == WeightLayout::kiln ? "kiln's layout (conv weights OHWI: out, kh, kw, in)"
                                 : "PyTorch's layout (conv weights OIHW: out, in, kh, kw)";
}
std::string layout_enum(WeightLayout l) { return l == WeightLayout::kiln ? "WeightLayout::kiln" : "WeightLayout::pytorch"; }

// Which layout the file `c` is in, as far as it can be told: its metadata, else the first conv
// weight whose shape fits one layout only. `fallback` when neither says.
WeightLayout file_layout(Module& m, const SafetensorsContents& c, const std::string& path, WeightLayout fallback,
                         std::string* evidence) {
  auto it = c.metadata.find(kLayoutKey);
  if (it != c.metadata.end()) {
    KILN_CHECK(it->second == "kiln" || it->second == "pytorch", "load_weights '", path, "': metadata ", kLayoutKey,
               " = \"", it->second, "\" is not a layout; accepted: \"kiln\", \"pytorch\"");
    *evidence = "its metadata says " + std::string(kLayoutKey) + " = \"" + it->second + "\"";
    return it->second == "kiln" ? WeightLayout::kiln : WeightLayout::pytorch;
  }
  for (auto& [name, t] : m.state_dict()) {
    const Layout l = layout_of(m, name);
    auto f = c.tensors.find(name);
    if (l.kind != Kind::conv_weight || f == c.tensors.end()) continue;
    const Shape kiln_shape = t.shape(), torch_shape = pytorch_shape(l, t.shape());
    if (kiln_shape == torch_shape) continue;  // kh = kw = in: either layout fits
    const Shape& got = f->second.shape();
    if (got != kiln_shape && got != torch_shape) continue;  // a wrong model: the shape check says so
    const WeightLayout found = got == kiln_shape ? WeightLayout::kiln : WeightLayout::pytorch;
    *evidence = "its " + name + " is " + shape_str(got) + ", the model's conv weight in that layout; in the other it is " +
                shape_str(found == WeightLayout::kiln ? torch_shape : kiln_shape);
    return found;
  }
  return fallback;
}
}  // namespace

void save_weights(Module& m, const std::string& path, WeightLayout layout) {
  StateDict sd = layout == WeightLayout::pytorch ? export_pytorch_state_dict(m) : m.state_dict();
  save_safetensors(path, sd, {{kLayoutKey, weight_layout_name(layout)}, {"kiln.model", m.type()}});
}

void load_weights(Module& m, const std::string& path, WeightLayout layout) {
  const SafetensorsContents c = load_safetensors(path);
  std::string evidence;
  const WeightLayout found = file_layout(m, c, path, layout, &evidence);
  KILN_CHECK(found == layout, "load_weights '", path, "': the file is in ", layout_words(found), ", not in ",
             layout_words(layout), " as asked (", evidence, "); load it with ", layout_enum(found));
  load_in_layout(m, c.tensors, /*strict=*/true, layout == WeightLayout::pytorch,
                 "load_weights '" + path + "' (" + weight_layout_name(layout) + " layout) into " + m.type());
}

// ---------------------------------------------------------------------------------------------
// Fine-tuning
std::vector<std::string> head_parameter_names(Module& m) {
  std::string head;
  bool found = false;
  for (auto& [path, mod] : m.named_modules())
    if (dynamic_cast<Linear*>(mod)) {
      head = path;
      found = true;
    }
  std::vector<std::string> out;
  if (!found) return out;
  for (auto& [name, t] : m.submodule(head).named_parameters()) out.push_back(head.empty() ? name : head + "." + name);
  return out;
}

InitReport import_pytorch_for_finetuning(Module& m, const StateDict& sd, const std::string& file,
                                         const std::vector<std::string>& keep_fresh) {
  const std::vector<std::string> head = head_parameter_names(m);
  auto is_head = [&](const std::string& n) { return std::find(head.begin(), head.end(), n) != head.end(); };
  auto ends_with = [](const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  InitReport r;
  StateDict take;
  const StateDict own = m.state_dict();
  std::vector<std::string> problems;
  for (auto& [name, t] : own) {
    const Shape want = pytorch_shape(layout_of(m, name), t.shape());
    auto it = sd.find(name);
    const bool wanted_fresh =
        std::any_of(keep_fresh.begin(), keep_fresh.end(), [&n = name](const std::string& p) { return name_under(n, p); });
    if (wanted_fresh) {
      r.fresh.push_back(name);
    } else if (it != sd.end() && it->second.shape() == want) {
      take[name] = it->second;
      r.loaded.push_back(name);
    } else if (is_head(name) || (it == sd.end() && ends_with(name, ".num_batches_tracked"))) {
      r.fresh.push_back(name);
    } else if (it == sd.end()) {
      problems.push_back(name + " is missing (the model's is " + shape_str(want) + ")");
    } else {
      problems.push_back(name + " is " + shape_str(it->second.shape()) + " in the file, " + shape_str(want) +
                         " in the model");
    }
  }
  KILN_CHECK(problems.empty(), "train.init '", file, "' does not fit ", m.type(), " (only the head, ",
             head.empty() ? std::string("none") : join(head), ", may differ or be missing): ", join(problems, "; "),
             ". Shapes are PyTorch's (OIHW convs); was the file made for another model or model options?");
  for (auto& [name, t] : sd)
    if (!own.count(name)) r.ignored.push_back(name);
  import_pytorch_state_dict(m, take, /*strict=*/false);
  return r;
}

}  // namespace kiln
