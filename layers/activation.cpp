#include "layers/activation.h"

#include "core/ops/dropout.h"
#include "core/ops/elementwise.h"
#include "core/ops/silu.h"
#include "layers/options.h"

namespace kiln {

Tensor ReLU::forward(const Tensor& x) { return ops::relu(x); }

Tensor SiLU::forward(const Tensor& x) { return ops::silu(x); }

DropoutOptions DropoutOptions::from_json(const json& j, const std::string& path) {
  JsonReader r = layer_reader(j, path);
  DropoutOptions o;
  o.p = r.get("p", o.p, 0.0, 1.0);
  r.finish();
  KILN_CHECK(o.p < 1.0, "config: ", r.path_of("p"), " = 1 would drop everything; accepted: 0 <= p < 1");
  return o;
}

json DropoutOptions::to_json() const { return {{"type", "dropout"}, {"p", p}}; }

Dropout::Dropout(const DropoutOptions& o) : Module("dropout"), opts_(o) {
  KILN_CHECK(o.p >= 0.0 && o.p < 1.0, "dropout: p ", o.p, " must be in [0, 1)");
}

Tensor Dropout::forward(const Tensor& x) {
  if (!is_training() || opts_.p == 0.0) return x;
  return ops::dropout(x, opts_.p, true);
}

}  // namespace kiln
