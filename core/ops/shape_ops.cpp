// concat: copies into slices of one output (copy_tensor, so any device); the backward slices the
// gradient. Composed: no kernel of its own.
#include "core/ops/shape_ops.h"

#include "core/autograd.h"

namespace kiln::ops {

Tensor concat(const std::vector<Tensor>& xs, int64_t dim) {
  KILN_CHECK(!xs.empty(), "concat of no tensors");
  const Tensor& first = xs[0];
  int64_t nd = first.dim();
  if (dim < 0) dim += nd;
  KILN_CHECK(dim >= 0 && dim < nd, "concat along dim ", dim, " of ", first.str());
  Shape out_shape = first.shape();
  out_shape[dim] = 0;
  for (const Tensor& t : xs) {
    KILN_CHECK(t.device() == first.device(), "concat: tensors on different devices: ", first.str(), " and ", t.str(),
               "; move them to one device with .to(device)");
    KILN_CHECK(t.dim() == nd && t.dtype() == first.dtype(), "concat: ", t.str(), " does not match ", first.str());
    for (int64_t d = 0; d < nd; ++d)
      KILN_CHECK(d == dim || t.shape()[d] == first.shape()[d], "concat along dim ", dim, ": ", t.str(),
                 " does not match ", first.str());
    out_shape[dim] += t.shape()[dim];
  }
  Tensor out = Tensor::empty(out_shape, first.dtype(), first.device());
  std::vector<int64_t> starts;
  int64_t at = 0;
  for (const Tensor& t : xs) {
    starts.push_back(at);
    copy_tensor(out.detach().slice(dim, at, at + t.shape()[dim]), t);
    at += t.shape()[dim];
  }
  std::vector<int64_t> sizes;
  for (const Tensor& t : xs) sizes.push_back(t.shape()[dim]);
  return record("concat", xs, out, [dim, starts, sizes](const Tensor& g) {
    grads gs;
    for (size_t i = 0; i < starts.size(); ++i) gs.push_back(g.slice(dim, starts[i], starts[i] + sizes[i]).contiguous());
    return gs;
  });
}

}  // namespace kiln::ops
