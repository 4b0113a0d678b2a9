// Helpers of the ONNX export tests (tests/onnx/onnx_export_test.cpp) and of `kiln export`'s tests
// (tests/cli/export_cmd_test.cpp): read an exported ModelProto and check its structure.
#pragma once
#include <gtest/gtest.h>

#include <onnx/checker.h>
#include <onnx/onnx_pb.h>

#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "layers/module.h"
#include "models/registry.h"

namespace kiln {
namespace {

namespace ox = ONNX_NAMESPACE;


inline ox::ModelProto parse(const std::string& bytes) {
  ox::ModelProto m;
  EXPECT_TRUE(m.ParseFromString(bytes));
  return m;
}

inline ox::ModelProto read_model(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return parse(bytes);
}

// The dims of a value_info: -1 for a symbolic dim, whose name goes to *param.
inline std::vector<int64_t> dims_of(const ox::ValueInfoProto& v, std::string* param) {
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

inline std::string metadata(const ox::ModelProto& m, const std::string& key) {
  for (auto& p : m.metadata_props())
    if (p.key() == key) return p.value();
  return "";
}

// (channels, side) each registry model is exported at: small where the model allows.
inline std::pair<int64_t, int64_t> input_for(const std::string& name) {
  if (name == "lenet") return {1, 28};
  if (name == "alexnet") return {3, 64};
  if (name.rfind("vgg", 0) == 0) return {3, 32};
  for (auto n : {"resnet18", "resnet34", "resnet50", "resnet101", "resnet152"})
    if (name == n) return {3, 64};
  return {3, 32};  // the CIFAR ResNets
}

// Checks the structure of `m`, exported from `model` for (c, side, side) inputs.
inline void check_structure(const ox::ModelProto& m, Module& model, int64_t c, int64_t side, int64_t classes) {
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

}  // namespace
}  // namespace kiln
