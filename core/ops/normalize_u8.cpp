// normalize_u8: the op (see normalize_u8.h): checks the arguments, takes the kernel of x's device.
#include "core/ops/normalize_u8.h"

#include "core/check.h"
#include "core/ops/dispatch.h"

namespace kiln {
KILN_DEFINE_KERNEL_SLOT(normalize_u8);
}  // namespace kiln

namespace kiln::ops {

Tensor normalize_u8(const Tensor& x, const std::vector<double>& mean, const std::vector<double>& std, DType out) {
  const Device d = op_device("normalize_u8", {x});
  KILN_CHECK(x.defined() && x.dtype() == DType::u8, "normalize_u8: x must be a u8 tensor, got ",
             x.defined() ? x.str() : std::string("an undefined tensor"));
  KILN_CHECK(x.dim() >= 1, "normalize_u8: x ", x.str(), " needs a channel dim (the last)");
  KILN_CHECK(out == DType::f32 || out == DType::bf16 || out == DType::f16, "normalize_u8: output dtype ",
             dtype_name(out), " is not accepted; accepted: f32, bf16, f16");
  const int64_t c = x.size(x.dim() - 1);
  KILN_CHECK(c >= 1 && c <= NormalizeU8Params::kMaxChannels, "normalize_u8: x ", x.str(), " has ", c,
             " channels; accepted: 1 to ", NormalizeU8Params::kMaxChannels);
  const auto expand = [&](const std::vector<double>& v, const char* what) {
    KILN_CHECK(v.size() == 1 || static_cast<int64_t>(v.size()) == c, "normalize_u8: ", what, " has ", v.size(),
               " values but x ", x.str(), " has ", c, " channels; give one value per channel (or one for all)");
    return v.size() == 1 ? std::vector<double>(static_cast<size_t>(c), v[0]) : v;
  };
  NormalizeU8Params p{expand(mean, "mean"), expand(std, "std")};
  for (size_t i = 0; i < p.std.size(); ++i)
    KILN_CHECK(p.std[i] != 0.0, "normalize_u8: std[", i, "] is zero; a standard deviation must be non-zero");
  return normalize_u8_kernel.get(d, "normalize_u8")(x.detach(), p, out);
}

}  // namespace kiln::ops
