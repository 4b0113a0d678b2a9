#include "layers/pooling.h"

#include "layers/options.h"

namespace kiln {

Pool2dOptions Pool2dOptions::from_json(const json& j, const std::string& path, const std::string& type) {
  JsonReader r = layer_reader(j, path);
  Pool2dOptions o;
  o.kernel_size = require_int(r, "kernel_size", 1, 1024);
  o.stride = r.get("stride", o.stride, int64_t{0}, int64_t{1024});
  o.padding = r.get("padding", o.padding, int64_t{0}, int64_t{1024});
  o.ceil_mode = r.get("ceil_mode", o.ceil_mode);
  if (type == "avg_pool2d") o.count_include_pad = r.get("count_include_pad", o.count_include_pad);
  r.finish();
  KILN_CHECK(2 * o.padding <= o.kernel_size, "config: ", r.path_of("padding"), " = ", o.padding,
             " must be at most half of kernel_size ", o.kernel_size, " (as in PyTorch)");
  return o;
}

json Pool2dOptions::to_json(const std::string& type) const {
  json j = {{"type", type}, {"kernel_size", kernel_size}, {"stride", stride}, {"padding", padding}, {"ceil_mode", ceil_mode}};
  if (type == "avg_pool2d") j["count_include_pad"] = count_include_pad;
  return j;
}

ops::Pool2dParams Pool2dOptions::params() const {
  ops::Pool2dParams p;
  p.kernel_h = p.kernel_w = kernel_size;
  p.stride_h = p.stride_w = stride > 0 ? stride : kernel_size;
  p.pad_h = p.pad_w = padding;
  p.ceil_mode = ceil_mode;
  p.count_include_pad = count_include_pad;
  return p;
}

namespace {
void check_pool(const Pool2dOptions& o, const char* type) {
  KILN_CHECK(o.kernel_size > 0 && o.stride >= 0 && o.padding >= 0 && 2 * o.padding <= o.kernel_size, type,
             ": invalid options kernel_size ", o.kernel_size, " stride ", o.stride, " padding ", o.padding,
             " (padding at most half the kernel)");
}
}  // namespace

MaxPool2d::MaxPool2d(const Pool2dOptions& o) : Module("max_pool2d"), opts_(o) { check_pool(o, "max_pool2d"); }
AvgPool2d::AvgPool2d(const Pool2dOptions& o) : Module("avg_pool2d"), opts_(o) { check_pool(o, "avg_pool2d"); }

AdaptiveAvgPool2dOptions AdaptiveAvgPool2dOptions::from_json(const json& j, const std::string& path) {
  JsonReader r = layer_reader(j, path);
  AdaptiveAvgPool2dOptions o;
  o.output_size = r.get("output_size", o.output_size, int64_t{1}, int64_t{4096});
  r.finish();
  return o;
}

json AdaptiveAvgPool2dOptions::to_json() const { return {{"type", "adaptive_avg_pool2d"}, {"output_size", output_size}}; }

AdaptiveAvgPool2d::AdaptiveAvgPool2d(const AdaptiveAvgPool2dOptions& o) : Module("adaptive_avg_pool2d"), opts_(o) {
  KILN_CHECK(o.output_size > 0, "adaptive_avg_pool2d: output_size ", o.output_size, " must be positive");
}

Tensor AdaptiveAvgPool2d::forward(const Tensor& x) {
  KILN_CHECK(x.dim() == 4, "adaptive_avg_pool2d: input ", x.str(), " must be (N, H, W, C)");
  // Already the right size (AlexNet/VGG at their native input size): nothing to average.
  if (x.size(1) == opts_.output_size && x.size(2) == opts_.output_size) return x;
  return ops::adaptive_avg_pool2d(x, opts_.output_size, opts_.output_size);
}

}  // namespace kiln
