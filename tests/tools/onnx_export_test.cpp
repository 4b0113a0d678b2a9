// ONNX export (tools/onnx_export.h, `kiln export`, tools/export_cmd.cpp): the structure of every
// registry model's graph (checker, input/output shapes, initializers = the PyTorch state dict),
// metadata, refusals, the command's errors, and one graph evaluated by hand. The numerics of every
// model against onnxruntime are tools/bench/onnx_compare.py's (Python stays out of the tests).
#include <gtest/gtest.h>

#include <cmath>

#include <onnx/checker.h>
#include <onnx/onnx_pb.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "../expect_error.h"
#include "core/autograd.h"
#include "core/io/safetensors.h"
#include "core/rng.h"
#include "data/image_encode.h"
#include "layers/activation.h"
#include "layers/init.h"
#include "layers/interop.h"
#include "layers/linear.h"
#include "models/registry.h"
#include "tools/checkpoint.h"
#include "tools/commands.h"
#include "tools/onnx_export.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
namespace ox = ONNX_NAMESPACE;
using kiln::testing::expect_error;

ox::ModelProto parse(const std::string& bytes) {
  ox::ModelProto m;
  EXPECT_TRUE(m.ParseFromString(bytes));
  return m;
}

ox::ModelProto read_model(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return parse(bytes);
}

// The dims of a value_info: -1 for a symbolic dim, whose name goes to *param.
std::vector<int64_t> dims_of(const ox::ValueInfoProto& v, std::string* param) {
  std::vector<int64_t> d;
  for (auto& dim : v.type().tensor_type().shape().dim()) {
    if (dim.has_dim_param()) {
      *param = dim.dim_param();
      d.push_back(-1);
    } else {
      d.push_back(dim.dim_value());
    }
  }
  return d;
}

std::string metadata(const ox::ModelProto& m, const std::string& key) {
  for (auto& p : m.metadata_props())
    if (p.key() == key) return p.value();
  return "";
}

// (channels, side) each registry model is exported at: small where the model allows.
std::pair<int64_t, int64_t> input_for(const std::string& name) {
  if (name == "lenet") return {1, 28};
  if (name == "alexnet") return {3, 64};
  if (name.rfind("vgg", 0) == 0) return {3, 32};
  for (auto n : {"resnet18", "resnet34", "resnet50", "resnet101", "resnet152"})
    if (name == n) return {3, 64};
  return {3, 32};  // the CIFAR ResNets
}

// Checks the structure of `m`, exported from `model` for (c, side, side) inputs.
void check_structure(const ox::ModelProto& m, Module& model, int64_t c, int64_t side, int64_t classes) {
  SCOPED_TRACE(model.type());
  EXPECT_NO_THROW(ox::checker::check_model(m));
  ASSERT_EQ(m.opset_import_size(), 1);
  EXPECT_EQ(m.opset_import(0).version(), 13);
  ASSERT_EQ(m.graph().input_size(), 1);
  ASSERT_EQ(m.graph().output_size(), 1);
  EXPECT_EQ(m.graph().input(0).name(), "input");
  EXPECT_EQ(m.graph().output(0).name(), "logits");
  std::string in_param, out_param;
  EXPECT_EQ(dims_of(m.graph().input(0), &in_param), (std::vector<int64_t>{-1, c, side, side}));
  EXPECT_EQ(dims_of(m.graph().output(0), &out_param), (std::vector<int64_t>{-1, classes}));
  EXPECT_EQ(in_param, "batch");
  EXPECT_EQ(out_param, "batch");
  // Initializers: exactly the state dict in PyTorch's layout, but the unused batch counters.
  // (kiln's conv weights are (O, kH, kW, I), PyTorch's (O, I, kH, kW); only the 4-D tensors are convs.)
  std::map<std::string, std::vector<int64_t>> expected, got;
  for (auto& [name, t] : model.state_dict()) {
    if (name.find("num_batches_tracked") != std::string::npos) continue;
    Shape s = t.shape();
    expected[name] = s.size() == 4 ? Shape{s[0], s[3], s[1], s[2]} : s;
  }
  for (auto& init : m.graph().initializer()) {
    EXPECT_EQ(init.data_type(), ox::TensorProto::FLOAT) << init.name();
    got[init.name()] = std::vector<int64_t>(init.dims().begin(), init.dims().end());
  }
  EXPECT_EQ(got, expected);
  EXPECT_EQ(static_cast<size_t>(m.graph().initializer_size()), expected.size());
}

TEST(OnnxExport, EveryRegistryModelPassesTheCheckerWithStateDictInitializers) {
  for (const std::string& name : models::model_names()) {
    auto [c, side] = input_for(name);
    json cfg = {{"name", name}, {"in_channels", c}, {"num_classes", 7}};
    init::SkipInitGuard skip;  // names and shapes only: drawing VGG's 130M weights would take the time
    std::shared_ptr<Module> model = models::build_model(cfg);
    model->eval();
    OnnxExportOptions o{c, side, side, name, {{"kiln.model", name}}};
    ox::ModelProto m = parse(export_onnx(*model, o));
    check_structure(m, *model, c, side, 7);
    EXPECT_EQ(metadata(m, "kiln.model"), name);
  }
}

TEST(OnnxExport, WeightsAreThePyTorchLayoutValues) {
  // LeNet: conv weights OIHW, and the first linear's columns in (c, h, w) order for the NCHW graph.
  std::shared_ptr<Module> model = models::build_model({{"name", "lenet"}});
  model->eval();
  ox::ModelProto m = parse(export_onnx(*model, {1, 28, 28, "lenet", {}}));
  StateDict sd = export_pytorch_state_dict(*model);
  int checked = 0;
  for (auto& init : m.graph().initializer()) {
    if (init.name() != "features.0.weight" && init.name() != "classifier.0.weight") continue;
    const Tensor& want = sd.at(init.name());
    ASSERT_EQ(init.raw_data().size(), static_cast<size_t>(want.numel()) * 4);
    EXPECT_EQ(std::memcmp(init.raw_data().data(), want.raw_data(), init.raw_data().size()), 0) << init.name();
    ++checked;
  }
  EXPECT_EQ(checked, 2);
}

// A layer the exporter does not know.
class Mystery : public Module {
 public:
  Mystery() : Module("mystery") {}
  Tensor forward(const Tensor& x) override { return x; }
  json to_json() const override { return {{"type", "mystery"}}; }
};

TEST(OnnxExport, UnsupportedLayersAreRefusedByPathAndType) {
  Sequential s;
  s.push_back(std::make_shared<ReLU>());
  s.push_back(std::make_shared<Mystery>());
  expect_error([&] { export_onnx(s, {3, 8, 8, "s", {}}); },
               {"onnx export: layer '1' of type 'mystery' is not supported", "supported: sequential, conv2d"});
  // LRN with an even window: ONNX centres it differently.
  std::shared_ptr<Module> lrn = models::build_model(json::parse(
      R"({"layers": [{"type": "local_response_norm", "size": 4}, {"type": "global_avg_pool"}]})"));
  expect_error([&] { export_onnx(*lrn, {3, 8, 8, "lrn", {}}); },
               {"local_response_norm '0' has size 4", "accepted: an odd size"});
  // A linear on a 4-D activation.
  std::shared_ptr<Module> lin = models::build_model(json::parse(
      R"({"layers": [{"type": "linear", "in_features": 3, "out_features": 2}]})"));
  expect_error([&] { export_onnx(*lin, {3, 8, 8, "lin", {}}); }, {"linear '0' takes (N, F) features", "add a flatten"});
}

// Evaluates a graph of Flatten, Gemm (transB = 1), Relu, Sigmoid and Mul nodes on an NCHW input, by hand.
std::vector<float> eval_by_hand(const ox::ModelProto& m, const std::vector<float>& input, int64_t batch) {
  std::map<std::string, std::pair<std::vector<float>, std::vector<int64_t>>> v;  // value -> (data, shape)
  for (auto& init : m.graph().initializer()) {
    std::vector<float> d(init.raw_data().size() / 4);
    std::memcpy(d.data(), init.raw_data().data(), init.raw_data().size());
    v[init.name()] = {d, std::vector<int64_t>(init.dims().begin(), init.dims().end())};
  }
  v["input"] = {input, {batch, static_cast<int64_t>(input.size()) / batch}};
  for (auto& n : m.graph().node()) {
    auto& x = v.at(n.input(0));
    if (n.op_type() == "Flatten") {
      v[n.output(0)] = {x.first, {batch, static_cast<int64_t>(x.first.size()) / batch}};
    } else if (n.op_type() == "Relu") {
      std::vector<float> y = x.first;
      for (float& e : y) e = std::max(e, 0.0f);
      v[n.output(0)] = {y, x.second};
    } else if (n.op_type() == "Sigmoid") {
      std::vector<float> y = x.first;
      for (float& e : y) e = static_cast<float>(1.0 / (1.0 + std::exp(-double(e))));
      v[n.output(0)] = {y, x.second};
    } else if (n.op_type() == "Mul") {
      const auto& b = v.at(n.input(1));
      std::vector<float> y = x.first;
      for (size_t i = 0; i < y.size(); ++i) y[i] *= b.first.at(i);
      v[n.output(0)] = {y, x.second};
    } else if (n.op_type() == "Gemm") {
      auto& w = v.at(n.input(1));
      auto& b = v.at(n.input(2));
      int64_t out = w.second[0], in = w.second[1];
      std::vector<float> y(static_cast<size_t>(batch * out));
      for (int64_t i = 0; i < batch; ++i)
        for (int64_t o = 0; o < out; ++o) {
          double s = b.first[static_cast<size_t>(o)];
          for (int64_t k = 0; k < in; ++k) s += double(x.first[static_cast<size_t>(i * in + k)]) * w.first[static_cast<size_t>(o * in + k)];
          y[static_cast<size_t>(i * out + o)] = static_cast<float>(s);
        }
      v[n.output(0)] = {y, {batch, out}};
    } else {
      ADD_FAILURE() << "unexpected op " << n.op_type();
      return {};
    }
  }
  return v.at("logits").first;
}

TEST(OnnxExport, FlattenLinearGraphEvaluatedByHandGivesKilnsLogits) {
  // kiln's activations are NHWC, the graph's NCHW: kiln's flatten gives (c, h, w) order, as ONNX Flatten.
  std::shared_ptr<Module> model = models::build_model(json::parse(R"({"layers": [
      {"type": "conv2d", "in_channels": 3, "out_channels": 4, "kernel_size": 1},
      {"type": "flatten"}, {"type": "linear", "in_features": 24, "out_features": 5}, {"type": "relu"},
      {"type": "dropout"}, {"type": "linear", "in_features": 5, "out_features": 3}]})"));
  model->eval();
  // The conv is 1x1 with 3 -> 4 channels; drop it for the by-hand graph by exporting the classifier
  // part on its own input: run the whole model in kiln, and check the tail graph on the conv's output.
  Sequential& seq = dynamic_cast<Sequential&>(*model);
  NoGradGuard ng;
  Tensor x = rand_normal({2, 2, 3, 3}, 0, 1);          // NHWC (2, H=2, W=3, C=3)
  Tensor feat = seq[0]->forward(x);                    // (2, 2, 3, 4)
  Tensor want = (*model)(x).contiguous();
  auto tail = std::make_shared<Sequential>();
  for (size_t i = 1; i < seq.size(); ++i) tail->push_back(seq[i]);
  ox::ModelProto m = parse(export_onnx(*tail, {4, 2, 3, "tail", {}}));
  Tensor nchw = feat.permute({0, 3, 1, 2}).contiguous();
  std::vector<float> in(nchw.data<float>(), nchw.data<float>() + nchw.numel());
  std::vector<float> got = eval_by_hand(m, in, 2);
  ASSERT_EQ(got.size(), static_cast<size_t>(want.numel()));
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want.data<float>()[i], 1e-5) << i;
}

TEST(OnnxExport, SiluIsSigmoidTimesItsInput) {
  std::shared_ptr<Module> model = models::build_model(json::parse(R"({"layers": [
      {"type": "flatten"}, {"type": "linear", "in_features": 12, "out_features": 6}, {"type": "silu"},
      {"type": "linear", "in_features": 6, "out_features": 3}]})"));
  model->eval();
  NoGradGuard ng;
  Tensor x = rand_normal({2, 2, 3, 2}, 0, 2);  // NHWC (2, H=2, W=3, C=2)
  Tensor want = (*model)(x).contiguous();
  ox::ModelProto m = parse(export_onnx(*model, {2, 2, 3, "silu", {}}));
  int sigmoids = 0, muls = 0;
  for (auto& n : m.graph().node()) sigmoids += n.op_type() == "Sigmoid", muls += n.op_type() == "Mul";
  EXPECT_EQ(sigmoids, 1);
  EXPECT_EQ(muls, 1);
  Tensor nchw = x.permute({0, 3, 1, 2}).contiguous();
  std::vector<float> got = eval_by_hand(m, std::vector<float>(nchw.data<float>(), nchw.data<float>() + nchw.numel()), 2);
  ASSERT_EQ(got.size(), static_cast<size_t>(want.numel()));
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want.data<float>()[i], 1e-5) << i;
}

// --- the command ----------------------------------------------------------------------------------

std::string temp_dir(const std::string& name) {
  std::string d = ::testing::TempDir() + "kiln_onnx_" + name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

json lenet_config() {
  return json::parse(R"({"model": {"name": "lenet"},
    "data": {"source": "synthetic", "synthetic": {"size": 4, "height": 28, "width": 28, "channels": 1, "num_classes": 10},
             "val_transforms": [{"type": "normalize", "mean": [0.286], "std": [0.353]}]},
    "train": {"seed": 3}})");
}

TEST(OnnxExportCommand, RunFolderGivesMetadataClassesAndAReference) {
  std::string run = temp_dir("run");
  std::ofstream(run + "/config.json") << lenet_config().dump();
  std::vector<std::string> classes = {"tee", "trouser", "pullover", "dress", "coat",
                                      "sandal", "shirt", "sneaker", "bag", "boot"};
  std::ofstream(run + "/classes.json") << json(classes).dump();
  std::string out = run + "/m.onnx", ref = run + "/ref.safetensors";
  EXPECT_EQ(cli::cmd_export({run, "init=random", "format=onnx", "out=" + out, "reference=" + ref}), 0);
  EXPECT_FALSE(fs::exists(out + ".tmp"));
  ox::ModelProto m = read_model(out);
  std::shared_ptr<Module> model = models::build_model({{"name", "lenet"}});
  check_structure(m, *model, 1, 28, 10);
  EXPECT_EQ(metadata(m, "kiln.model"), "lenet");
  EXPECT_EQ(metadata(m, "kiln.input_layout"), "NCHW float32 (batch, 1, 28, 28)");
  EXPECT_EQ(metadata(m, "kiln.channel_order"), "grey");
  EXPECT_EQ(metadata(m, "kiln.mean"), "[0.286]");
  EXPECT_EQ(metadata(m, "kiln.std"), "[0.353]");
  EXPECT_NE(metadata(m, "kiln.val_transforms").find("normalize"), std::string::npos);
  EXPECT_NE(metadata(m, "kiln.pixel_scale").find("/ 255"), std::string::npos);
  EXPECT_EQ(metadata(m, "kiln.classes"), json(classes).dump());
  EXPECT_EQ(metadata(m, "kiln.weights"), "init=random, seed 3");
  // Class names that do not match the model's outputs are refused naming the file.
  std::ofstream(run + "/classes.json") << R"(["a", "b"])";
  expect_error([&] { cli::cmd_export({run, "init=random", "out=" + run + "/m2.onnx"}); },
               {"classes.json' names 2 classes but the model has 10 outputs"});

  // The reference: kiln's logits of the model the config's seed builds, on the stored input.
  SafetensorsContents r = load_safetensors(ref);
  ASSERT_EQ(r.tensors.count("input"), 1u);
  ASSERT_EQ(r.tensors.count("logits"), 1u);
  EXPECT_EQ(r.tensors.at("input").shape(), (Shape{4, 1, 28, 28}));
  EXPECT_EQ(r.tensors.at("logits").shape(), (Shape{4, 10}));
  manual_seed(3);
  std::shared_ptr<Module> same = models::build_model({{"name", "lenet"}});
  same->eval();
  NoGradGuard ng;
  Tensor logits = (*same)(r.tensors.at("input").permute({0, 2, 3, 1}).contiguous()).contiguous();
  for (int64_t i = 0; i < logits.numel(); ++i)
    EXPECT_FLOAT_EQ(logits.data<float>()[i], r.tensors.at("logits").data<float>()[i]) << i;
}

TEST(OnnxExportCommand, WeightsFileIsExported) {
  std::string d = temp_dir("weights");
  std::ofstream(d + "/c.json") << lenet_config().dump();
  std::shared_ptr<Module> model = models::build_model({{"name", "lenet"}});
  for (auto& [name, t] : model->named_parameters()) t.fill_(0.25f);
  save_safetensors(d + "/w.safetensors", export_pytorch_state_dict(*model));
  EXPECT_EQ(cli::cmd_export({d + "/c.json", "weights=" + d + "/w.safetensors", "out=" + d + "/m.onnx"}), 0);
  ox::ModelProto m = read_model(d + "/m.onnx");
  EXPECT_EQ(metadata(m, "kiln.weights"), d + "/w.safetensors");
  EXPECT_TRUE(metadata(m, "kiln.classes").empty());  // a config file: no classes.json
  int checked = 0;
  for (auto& init : m.graph().initializer()) {
    if (init.name() != "classifier.3.bias") continue;
    float v;
    std::memcpy(&v, init.raw_data().data(), 4);
    EXPECT_EQ(v, 0.25f);
    ++checked;
  }
  EXPECT_EQ(checked, 1);
}

TEST(OnnxExportCommand, RunFolderWithoutWeightsExportsItsLastCheckpoint) {
  std::string run = temp_dir("ckpt");
  std::ofstream(run + "/config.json") << lenet_config().dump();
  std::shared_ptr<Module> model = models::build_model({{"name", "lenet"}});
  for (auto& [name, t] : model->named_parameters()) t.fill_(-0.5f);
  TrainingState state;
  state.config = lenet_config();
  save_checkpoint(run + "/last", *model, state);
  EXPECT_EQ(cli::cmd_export({run, "out=" + run + "/m.onnx"}), 0);
  ox::ModelProto m = read_model(run + "/m.onnx");
  EXPECT_EQ(metadata(m, "kiln.weights"), run);
  int checked = 0;
  for (auto& init : m.graph().initializer()) {
    if (init.name() != "classifier.3.bias") continue;
    float v;
    std::memcpy(&v, init.raw_data().data(), 4);
    EXPECT_EQ(v, -0.5f);
    ++checked;
  }
  EXPECT_EQ(checked, 1);
}

TEST(OnnxExportCommand, ReferenceFromImagesGoesThroughTheValidationTransforms) {
  std::string d = temp_dir("images");
  fs::create_directories(d + "/photos");
  std::ofstream(d + "/c.json") << lenet_config().dump();
  // Two 28x28 grey PNGs (and a file that is not an image, which a folder listing skips).
  for (int k = 0; k < 2; ++k) {
    std::vector<uint8_t> px(28 * 28);
    for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>((i * 7 + k * 50) % 256);
    write_file(d + "/photos/" + std::to_string(k) + ".png", encode_png(px.data(), 28, 28, 1));
  }
  std::ofstream(d + "/photos/notes.txt") << "not an image";
  std::string ref = d + "/ref.safetensors";
  EXPECT_EQ(cli::cmd_export({d + "/c.json", "init=random", "out=" + d + "/m.onnx", "reference=" + ref,
                             "images=" + d + "/photos"}), 0);
  SafetensorsContents r = load_safetensors(ref);
  const Tensor& in = r.tensors.at("input");
  ASSERT_EQ(in.shape(), (Shape{2, 1, 28, 28}));
  for (int k = 0; k < 2; ++k)
    for (size_t i = 0; i < 28 * 28; i += 97) {
      float px = static_cast<float>((i * 7 + k * 50) % 256);
      EXPECT_NEAR(in.data<float>()[k * 784 + i], (px / 255.0 - 0.286) / 0.353, 1e-5) << k << " " << i;
    }
  EXPECT_EQ(r.tensors.at("logits").shape(), (Shape{2, 10}));
  // An image of another size is refused naming it and the size the model takes, before any file is written.
  std::vector<uint8_t> small(10 * 10, 9);
  write_file(d + "/small.png", encode_png(small.data(), 10, 10, 1));
  expect_error([&] { cli::cmd_export({d + "/c.json", "init=random", "out=" + d + "/m2.onnx", "reference=" + ref,
                                      "images=" + d + "/small.png"}); },
               {"image '" + d + "/small.png' is 10x10x1", "the model takes 28x28x1"});
  EXPECT_FALSE(fs::exists(d + "/m2.onnx"));
}

TEST(OnnxExportCommand, ErrorsNameTheArgument) {
  std::string d = temp_dir("errors");
  std::string cfg = d + "/c.json";
  std::ofstream(cfg) << lenet_config().dump();
  expect_error([&] { cli::cmd_export({cfg, "init=random", "format=tflite", "out=" + d + "/m"}); },
               {"format=tflite is not accepted; accepted: onnx"});
  expect_error([&] { cli::cmd_export({cfg, "init=random", "format=onnx"}); }, {"out=FILE is required"});
  expect_error([&] { cli::cmd_export({cfg, "out=" + d + "/m.onnx"}); }, {"needs weights=FILE", "or init=random"});
  expect_error([&] { cli::cmd_export({cfg, "init=zeros", "out=" + d + "/m.onnx"}); },
               {"init=zeros is not accepted; accepted: random"});
  expect_error([&] { cli::cmd_export({cfg, "init=random", "out=" + d + "/m.onnx", "images=" + d}); },
               {"images= needs reference=FILE"});
  expect_error([&] { cli::cmd_export({d, "init=random", "out=" + d + "/m.onnx"}); },
               {"is a folder without config.json"});
  expect_error([&] { cli::cmd_export({cfg, "init=random", "out=" + d + "/no/such/dir/m.onnx"}); },
               {"cannot write", "m.onnx.tmp"});
  EXPECT_FALSE(fs::exists(d + "/m.onnx"));
  EXPECT_EQ(cli::cmd_export({"--help"}), 0);
}

}  // namespace
}  // namespace kiln
