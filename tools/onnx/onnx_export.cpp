#include "tools/onnx/onnx_export.h"

#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <set>

#include "core/autograd.h"
#include "layers/activation.h"
#include "layers/blocks.h"
#include "layers/conv.h"
#include "layers/interop.h"
#include "layers/linear.h"
#include "layers/norm.h"
#include "layers/pooling.h"
#include "layers/sequential.h"
#include "models/common.h"
#include "models/registry.h"
#include "models/resnet.h"

namespace kiln {

namespace {

namespace ox = ONNX_NAMESPACE;
using Dims = std::vector<int64_t>;  // a value's shape without the batch dim

struct Value {
  std::string name;
  Dims dims;  // (C, H, W) or (F)
};

const char* kSupported =
    "sequential, conv2d, batch_norm2d, batch_norm1d, relu, silu, dropout, max_pool2d, avg_pool2d, adaptive_avg_pool2d, "
    "global_avg_pool, flatten, linear, local_response_norm (odd size), basic_block, bottleneck (with or without "
    "squeeze-and-excitation), and the models "
    "lenet, alexnet, vgg*, resnet*, a \"layers\" list";

class GraphBuilder {
 public:
  // The state dict shares the module's storage; each tensor is converted to PyTorch's layout when
  // it becomes an initializer (one transient copy at a time, not a second copy of the model).
  GraphBuilder(Module& root, ox::GraphProto& g) : root_(root), g_(g), sd_(root.state_dict()) {}

  // Emits module `m` at dotted path `path` on input `x`; returns its output.
  Value emit(Module& m, const std::string& path, const Value& x) {
    if (auto* r = dynamic_cast<models::ResNet*>(&m)) return children(*r, path, x, "");
    if (auto* f = dynamic_cast<models::FeatureClassifier*>(&m)) return children(*f, path, x, "classifier");
    if (auto* l = dynamic_cast<models::LayerListModel*>(&m)) return children(*l, path, x, "");
    if (m.type() == "sequential" && dynamic_cast<Sequential*>(&m)) return children(m, path, x, "");
    if (auto* c = dynamic_cast<Conv2d*>(&m)) return conv(*c, path, x);
    if (auto* b = dynamic_cast<BatchNorm2d*>(&m)) return batch_norm(*b, path, x);
    if (dynamic_cast<ReLU*>(&m)) return node("Relu", path, {x.name}, x.dims);
    if (dynamic_cast<SiLU*>(&m)) {  // x * sigmoid(x): ONNX has no SiLU operator
      Value s = node("Sigmoid", path, {x.name}, x.dims);
      return node("Mul", path, {x.name, s.name}, x.dims);
    }
    if (dynamic_cast<Dropout*>(&m)) return x;  // identity in eval: no node
    if (dynamic_cast<MaxPool2d*>(&m) || dynamic_cast<AvgPool2d*>(&m)) return pool(m, path, x);
    if (dynamic_cast<AdaptiveAvgPool2d*>(&m)) return adaptive_pool(m, path, x);
    if (dynamic_cast<GlobalAvgPool*>(&m)) {
      need_rank(m, path, x, 3);
      Value p = node("GlobalAveragePool", path, {x.name}, {x.dims[0], 1, 1});
      return flatten(path, p);
    }
    if (dynamic_cast<Flatten*>(&m)) return flatten(path, x);
    if (auto* l = dynamic_cast<Linear*>(&m)) return linear(*l, path, x);
    if (dynamic_cast<LocalResponseNorm*>(&m)) return lrn(m, path, x);
    if (auto* b = dynamic_cast<BasicBlock*>(&m)) return basic_block(*b, path, x);
    if (auto* b = dynamic_cast<Bottleneck*>(&m)) return bottleneck(*b, path, x);
    // A program's own model or layer (core/registry.h) that is a Sequential of kiln's layers: its layers
    // in order, once its forward is checked to be exactly that (the exporter cannot see inside a forward).
    if (auto* seq = dynamic_cast<Sequential*>(&m)) {
      check_runs_in_order(*seq, path, x);
      return children(m, path, x, "");
    }
    KILN_FAIL("onnx export: layer '", path.empty() ? std::string("(the model)") : path, "' of type '", m.type(),
              "' is not supported; supported: ", kSupported);
  }

  // Refuses a Sequential whose forward is not its layers run in order: on a fixed input (a batch of 2,
  // eval mode) its output must equal theirs.
  void check_runs_in_order(Sequential& s, const std::string& path, const Value& x) {
    const Shape shape = x.dims.size() == 3 ? Shape{2, x.dims[1], x.dims[2], x.dims[0]} : Shape{2, x.dims.at(0)};
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)));
    const Tensor in = Tensor::from_vector(v, shape);
    NoGradGuard no_grad;
    const bool was_training = s.is_training();
    s.eval();
    const std::vector<float> own = s.forward(in).to_float_vector();
    const std::vector<float> in_order = run_layers(s.layers(), in).to_float_vector();
    s.train(was_training);
    bool same = own.size() == in_order.size();
    for (size_t i = 0; same && i < own.size(); ++i) same = std::fabs(own[i] - in_order[i]) <= 1e-5f * (1 + std::fabs(own[i]));
    KILN_CHECK(same, "onnx export: '", path.empty() ? std::string("(the model)") : path, "' of type '", s.type(),
               "' is a Sequential whose forward is not its layers run in order (its output differs from theirs), so "
               "its layers' graph would not be the model; exported: models whose forward runs kiln's layers in order ",
               "(a Sequential of them, nested or not); supported layers: ", kSupported);
  }

  // Every state-dict tensor the graph must use was used (num_batches_tracked is not needed).
  void check_all_used() const {
    for (auto& [name, t] : sd_) {
      if (name.size() >= 19 && name.substr(name.size() - 19) == "num_batches_tracked") continue;
      KILN_CHECK(used_.count(name), "onnx export: the state-dict tensor '", name, "' is not used by the exported graph "
                 "(a layer whose forward the exporter does not reproduce)");
    }
  }

  ox::NodeProto* last_node() { return g_.mutable_node()->empty() ? nullptr : &g_.mutable_node()->at(g_.node_size() - 1); }

 private:
  static std::string join_path(const std::string& a, const std::string& b) { return a.empty() ? b : a + "." + b; }

  Value children(Module& m, const std::string& path, Value x, const std::string& flatten_before) {
    for (auto& [name, child] : m.named_children()) {
      if (name == flatten_before) x = flatten(path, x);
      x = emit(*child, join_path(path, name), x);
    }
    return x;
  }

  void need_rank(Module& m, const std::string& path, const Value& x, size_t rank) {
    KILN_CHECK(x.dims.size() == rank, "onnx export: layer '", path, "' (", m.type(), ") takes a ",
               rank == 3 ? "(N, C, H, W)" : "(N, F)", " input but gets one of ", x.dims.size() + 1, " dims");
  }

  std::string fresh(const std::string& path, const std::string& op) {
    std::string base = (path.empty() ? std::string("model") : path) + "/" + op;
    int n = counts_[base]++;
    return n == 0 ? base : base + "_" + std::to_string(n);
  }

  Value node(const std::string& op, const std::string& path, const std::vector<std::string>& inputs, Dims dims,
             ox::NodeProto** out = nullptr) {
    ox::NodeProto* n = g_.add_node();
    std::string name = fresh(path, op);
    n->set_name(name);
    n->set_op_type(op);
    for (auto& i : inputs) n->add_input(i);
    n->add_output(name);
    if (out) *out = n;
    return {name, std::move(dims)};
  }

  static void attr(ox::NodeProto* n, const std::string& name, int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(ox::AttributeProto::INT);
    a->set_i(v);
  }
  static void attr(ox::NodeProto* n, const std::string& name, float v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(ox::AttributeProto::FLOAT);
    a->set_f(v);
  }
  static void attr(ox::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(ox::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }

  static void fill(ox::TensorProto* t, const std::string& name, const Tensor& v) {
    t->set_name(name);
    Tensor c = v.contiguous();
    for (int64_t d : c.shape()) t->add_dims(d);
    if (c.dtype() == DType::f32) {
      t->set_data_type(ox::TensorProto::FLOAT);
      t->set_raw_data(c.raw_data(), static_cast<size_t>(c.numel()) * sizeof(float));
    } else {
      KILN_CHECK(c.dtype() == DType::i64, "onnx export: tensor '", name, "' is ", dtype_name(c.dtype()),
                 "; accepted: f32 (weights), i64 (constants)");
      t->set_data_type(ox::TensorProto::INT64);
      t->set_raw_data(c.raw_data(), static_cast<size_t>(c.numel()) * sizeof(int64_t));
    }
  }

  // The initializer holding state-dict tensor `name` (added once), as f32 in PyTorch's layout.
  std::string weight(const std::string& name) {
    auto it = sd_.find(name);
    KILN_CHECK(it != sd_.end(), "onnx export: the model has no tensor '", name, "'");
    if (used_.insert(name).second) {
      NoGradGuard ng;
      fill(g_.add_initializer(), name, to_pytorch_layout(root_, name, it->second).to(DType::f32));
    }
    return name;
  }

  // A Constant node (constants are not initializers: those are exactly the state dict).
  std::string constant(const std::string& path, const Tensor& v) {
    ox::NodeProto* n = nullptr;
    Value out = node("Constant", path, {}, {}, &n);
    auto* a = n->add_attribute();
    a->set_name("value");
    a->set_type(ox::AttributeProto::TENSOR);
    fill(a->mutable_t(), out.name, v);
    return out.name;
  }
  std::string constant_i64(const std::string& path, const std::vector<int64_t>& v) {
    return constant(path, Tensor::from_vector(v, {static_cast<int64_t>(v.size())}));
  }

  // (N, C, H, W) -> (N, C*H*W): the (c, h, w) order kiln's Flatten gives (layers/linear.h).
  Value flatten(const std::string& path, const Value& x) {
    if (x.dims.size() == 1) return x;
    int64_t f = 1;
    for (int64_t d : x.dims) f *= d;
    ox::NodeProto* n = nullptr;
    Value out = node("Flatten", path, {x.name}, {f}, &n);
    attr(n, "axis", int64_t{1});
    return out;
  }

  Value conv(Conv2d& c, const std::string& path, const Value& x) {
    need_rank(c, path, x, 3);
    const Conv2dOptions& o = c.options();
    KILN_CHECK(x.dims[0] == o.in_channels, "onnx export: conv2d '", path, "' takes ", o.in_channels,
               " channels but gets ", x.dims[0]);
    auto out_side = [&](int64_t s) { return (s + 2 * o.padding - o.dilation * (o.kernel_size - 1) - 1) / o.stride + 1; };
    Dims dims = {o.out_channels, out_side(x.dims[1]), out_side(x.dims[2])};
    KILN_CHECK(dims[1] > 0 && dims[2] > 0, "onnx export: conv2d '", path, "' gets a ", x.dims[1], "x", x.dims[2],
               " input, too small for its ", o.kernel_size, "x", o.kernel_size, " kernel");
    std::vector<std::string> in = {x.name, weight(join_path(path, "weight"))};
    if (o.bias) in.push_back(weight(join_path(path, "bias")));
    ox::NodeProto* n = nullptr;
    Value out = node("Conv", path, in, dims, &n);
    attr(n, "kernel_shape", Dims{o.kernel_size, o.kernel_size});
    attr(n, "strides", Dims{o.stride, o.stride});
    attr(n, "pads", Dims{o.padding, o.padding, o.padding, o.padding});
    attr(n, "dilations", Dims{o.dilation, o.dilation});
    attr(n, "group", o.groups);
    return out;
  }

  Value batch_norm(BatchNorm2d& b, const std::string& path, const Value& x) {
    KILN_CHECK(!x.dims.empty() && x.dims[0] == b.options().num_features, "onnx export: ", b.type(), " '", path,
               "' has ", b.options().num_features, " features but gets ", x.dims.empty() ? 0 : x.dims[0]);
    ox::NodeProto* n = nullptr;
    Value out = node("BatchNormalization", path,
                     {x.name, weight(join_path(path, "weight")), weight(join_path(path, "bias")),
                      weight(join_path(path, "running_mean")), weight(join_path(path, "running_var"))},
                     x.dims, &n);
    attr(n, "epsilon", static_cast<float>(b.options().eps));
    return out;
  }

  Value pool(Module& m, const std::string& path, const Value& x) {
    need_rank(m, path, x, 3);
    Pool2dOptions po = Pool2dOptions::from_json(m.to_json(), path, m.type());
    ops::Pool2dParams p = po.params();
    Shape kiln_out = ops::pool2d_output_shape({1, x.dims[1], x.dims[2], x.dims[0]}, p);
    KILN_CHECK(kiln_out[1] > 0 && kiln_out[2] > 0, "onnx export: ", m.type(), " '", path, "' gets a ", x.dims[1], "x",
               x.dims[2], " input, too small for its window");
    // ONNX's floor mode with the end padding grown so that it gives kiln's (PyTorch's) ceil-mode
    // size: exact for max pooling (padding never wins) and for averages that ignore padding.
    Dims pads = {p.pad_h, p.pad_w, p.pad_h, p.pad_w};
    int64_t extra_h = (kiln_out[1] - 1) * p.stride_h + p.kernel_h - (x.dims[1] + 2 * p.pad_h);
    int64_t extra_w = (kiln_out[2] - 1) * p.stride_w + p.kernel_w - (x.dims[2] + 2 * p.pad_w);
    bool avg = m.type() == "avg_pool2d";
    if (extra_h > 0 || extra_w > 0) {
      KILN_CHECK(!avg || !p.count_include_pad, "onnx export: avg_pool2d '", path, "' with ceil_mode and "
                 "count_include_pad on a ", x.dims[1], "x", x.dims[2], " input has a partial last window ONNX cannot "
                 "express; accepted: count_include_pad false, or an input size where ceil_mode adds no window");
      pads[2] += std::max<int64_t>(extra_h, 0);
      pads[3] += std::max<int64_t>(extra_w, 0);
    }
    ox::NodeProto* n = nullptr;
    Value out = node(avg ? "AveragePool" : "MaxPool", path, {x.name}, {x.dims[0], kiln_out[1], kiln_out[2]}, &n);
    attr(n, "kernel_shape", Dims{p.kernel_h, p.kernel_w});
    attr(n, "strides", Dims{p.stride_h, p.stride_w});
    attr(n, "pads", pads);
    if (avg) attr(n, "count_include_pad", int64_t{p.count_include_pad ? 1 : 0});
    return out;
  }

  // PyTorch's bins: start floor(i*H/O), end ceil((i+1)*H/O). The input size as is: no node; bins
  // that tile the input: AveragePool; otherwise a (H*W, O*O) averaging matrix applied by MatMul.
  Value adaptive_pool(Module& m, const std::string& path, const Value& x) {
    need_rank(m, path, x, 3);
    int64_t o = AdaptiveAvgPool2dOptions::from_json(m.to_json(), path).output_size;
    int64_t c = x.dims[0], h = x.dims[1], w = x.dims[2];
    if (h == o && w == o) return x;
    if (h % o == 0 && w % o == 0) {
      ox::NodeProto* n = nullptr;
      Value out = node("AveragePool", path, {x.name}, {c, o, o}, &n);
      attr(n, "kernel_shape", Dims{h / o, w / o});
      attr(n, "strides", Dims{h / o, w / o});
      return out;
    }
    std::vector<float> mat(static_cast<size_t>(h * w * o * o), 0.0f);
    for (int64_t i = 0; i < o; ++i) {
      int64_t h0 = i * h / o, h1 = ((i + 1) * h + o - 1) / o;
      for (int64_t j = 0; j < o; ++j) {
        int64_t w0 = j * w / o, w1 = ((j + 1) * w + o - 1) / o;
        float inv = 1.0f / static_cast<float>((h1 - h0) * (w1 - w0));
        for (int64_t y = h0; y < h1; ++y)
          for (int64_t xx = w0; xx < w1; ++xx) mat[static_cast<size_t>((y * w + xx) * o * o + i * o + j)] = inv;
      }
    }
    Value flat = node("Reshape", path, {x.name, constant_i64(path, {0, c, h * w})}, {c, h * w});
    Value pooled = node("MatMul", path, {flat.name, constant(path, Tensor::from_vector(mat, {h * w, o * o}))}, {c, o * o});
    return node("Reshape", path, {pooled.name, constant_i64(path, {0, c, o, o})}, {c, o, o});
  }

  Value linear(Linear& l, const std::string& path, const Value& x) {
    KILN_CHECK(x.dims.size() == 1, "onnx export: linear '", path, "' takes (N, F) features but gets a ",
               x.dims.size() + 1, "-D input; add a flatten or global_avg_pool before it");
    const LinearOptions& o = l.options();
    KILN_CHECK(x.dims[0] == o.in_features, "onnx export: linear '", path, "' takes ", o.in_features,
               " features but gets ", x.dims[0]);
    std::vector<std::string> in = {x.name, weight(join_path(path, "weight"))};
    if (o.bias) in.push_back(weight(join_path(path, "bias")));
    ox::NodeProto* n = nullptr;
    Value out = node("Gemm", path, in, {o.out_features}, &n);
    attr(n, "transB", int64_t{1});
    return out;
  }

  Value lrn(Module& m, const std::string& path, const Value& x) {
    need_rank(m, path, x, 3);
    LocalResponseNormOptions o = LocalResponseNormOptions::from_json(m.to_json(), path);
    // kiln sums channels c - size/2 .. c + (size-1)/2, ONNX c - (size-1)/2 .. c + size/2: equal for odd sizes.
    KILN_CHECK(o.size % 2 == 1, "onnx export: local_response_norm '", path, "' has size ", o.size,
               "; ONNX's LRN centres even windows differently; accepted: an odd size");
    ox::NodeProto* n = nullptr;
    Value out = node("LRN", path, {x.name}, x.dims, &n);
    attr(n, "size", o.size);
    attr(n, "alpha", static_cast<float>(o.alpha));
    attr(n, "beta", static_cast<float>(o.beta));
    attr(n, "bias", static_cast<float>(o.k));
    return out;
  }

  Value conv_bn(Conv2d& c, BatchNorm2d& b, const std::string& path, const std::string& cn, const std::string& bn,
                const Value& x, bool relu) {
    Value h = batch_norm(b, join_path(path, bn), conv(c, join_path(path, cn), x));
    return relu ? node("Relu", join_path(path, bn), {h.name}, h.dims) : h;
  }

  // relu(residual + shortcut(x)), as ResidualBlock::finish.
  Value finish(ResidualBlock& b, const std::string& path, const Value& residual, const Value& x) {
    const BlockOptions& o = b.options();
    Value identity = x;
    bool changes = o.stride != 1 || o.in_channels != b.out_channels();
    if (changes && o.shortcut == "B") {
      identity = emit(b.submodule("downsample"), join_path(path, "downsample"), x);
    } else if (changes) {  // A: x[:, :, ::s, ::s] with zero channels on both sides
      if (o.stride != 1) {
        const int64_t big = std::numeric_limits<int64_t>::max();
        identity = node("Slice", path,
                        {x.name, constant_i64(path, {0, 0}), constant_i64(path, {big, big}), constant_i64(path, {2, 3}),
                         constant_i64(path, {o.stride, o.stride})},
                        {x.dims[0], (x.dims[1] + o.stride - 1) / o.stride, (x.dims[2] + o.stride - 1) / o.stride});
      }
      int64_t extra = b.out_channels() - o.in_channels;
      if (extra > 0) {
        Dims d = identity.dims;
        d[0] += extra;
        identity = node("Pad", path, {identity.name, constant_i64(path, {0, extra / 2, 0, 0, 0, extra - extra / 2, 0, 0})}, d);
      }
    }
    KILN_CHECK(identity.dims == residual.dims, "onnx export: block '", path, "': shortcut and residual shapes differ");
    const Value branch = b.se ? squeeze_excite(*b.se, join_path(path, "se"), residual) : residual;
    Value sum = node("Add", path, {branch.name, identity.name}, residual.dims);
    return node("Relu", path, {sum.name}, sum.dims);
  }

  // x * sigmoid(fc2(relu(fc1(mean over H, W)))), the gate broadcast over H and W, as SqueezeExcite.
  Value squeeze_excite(SqueezeExcite& se, const std::string& path, const Value& x) {
    const int64_t c = x.dims[0];
    Value pooled = flatten(path, node("GlobalAveragePool", path, {x.name}, {c, 1, 1}));
    Value h = linear(*se.fc1, join_path(path, "fc1"), pooled);
    h = node("Relu", path, {h.name}, h.dims);
    Value gate = node("Sigmoid", path, {linear(*se.fc2, join_path(path, "fc2"), h).name}, {c});
    gate = node("Reshape", path, {gate.name, constant_i64(path, {0, c, 1, 1})}, {c, 1, 1});
    return node("Mul", path, {x.name, gate.name}, x.dims);
  }

  Value basic_block(BasicBlock& b, const std::string& path, const Value& x) {
    need_rank(b, path, x, 3);
    Value h = conv_bn(*b.conv1, *b.bn1, path, "conv1", "bn1", x, true);
    h = conv_bn(*b.conv2, *b.bn2, path, "conv2", "bn2", h, false);
    return finish(b, path, h, x);
  }

  Value bottleneck(Bottleneck& b, const std::string& path, const Value& x) {
    need_rank(b, path, x, 3);
    Value h = conv_bn(*b.conv1, *b.bn1, path, "conv1", "bn1", x, true);
    h = conv_bn(*b.conv2, *b.bn2, path, "conv2", "bn2", h, true);
    h = conv_bn(*b.conv3, *b.bn3, path, "conv3", "bn3", h, false);
    return finish(b, path, h, x);
  }

  Module& root_;
  ox::GraphProto& g_;
  StateDict sd_;
  std::set<std::string> used_;
  std::map<std::string, int> counts_;
};

void set_float_tensor_type(ox::ValueInfoProto* v, const std::string& name, const Dims& dims) {
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(ox::TensorProto::FLOAT);
  auto* shape = tt->mutable_shape();
  shape->add_dim()->set_dim_param("batch");
  for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
}

}  // namespace

std::string export_onnx(Module& model, const OnnxExportOptions& o) {
  KILN_CHECK(o.channels > 0 && o.height > 0 && o.width > 0, "onnx export: the input size (", o.channels, ", ",
             o.height, ", ", o.width, ") must be positive");
  ox::ModelProto mp;
  mp.set_ir_version(ox::IR_VERSION_2020_5_8);  // IR 7: the version of opset 13 (ONNX 1.8)
  mp.set_producer_name("kiln");
  mp.set_model_version(1);
  auto* op = mp.add_opset_import();
  op->set_domain("");
  op->set_version(kOnnxOpset);
  for (auto& [k, v] : o.metadata) {
    auto* p = mp.add_metadata_props();
    p->set_key(k);
    p->set_value(v);
  }
  ox::GraphProto* g = mp.mutable_graph();
  g->set_name(o.graph_name);
  set_float_tensor_type(g->add_input(), "input", {o.channels, o.height, o.width});

  GraphBuilder b(model, *g);
  Value out = b.emit(model, "", {"input", {o.channels, o.height, o.width}});
  b.check_all_used();
  KILN_CHECK(out.dims.size() == 1, "onnx export: the model's output has ", out.dims.size() + 1,
             " dims; accepted: (N, classes) logits");
  ox::NodeProto* last = b.last_node();
  if (last && last->output(0) == out.name) {
    last->set_output(0, "logits");
  } else {  // the output is the input or a constant's: name it through an Identity
    ox::NodeProto* n = g->add_node();
    n->set_name("logits/Identity");
    n->set_op_type("Identity");
    n->add_input(out.name);
    n->add_output("logits");
  }
  set_float_tensor_type(g->add_output(), "logits", out.dims);

  try {
    ox::checker::check_model(mp);
    ox::ShapeInferenceOptions si{true, 1, false};
    ox::shape_inference::InferShapes(mp, ox::OpSchemaRegistry::Instance(), si);
  } catch (const std::exception& e) {
    KILN_FAIL("onnx export: onnx rejects the exported ", o.graph_name, " graph: ", e.what());
  }
  std::string bytes;
  KILN_CHECK(mp.SerializeToString(&bytes), "onnx export: the ", o.graph_name,
             " model does not serialize (over protobuf's 2 GiB limit?)");
  return bytes;
}

}  // namespace kiln
