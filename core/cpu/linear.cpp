// The matrix product on the CPU (the kernel of core/ops/linear.h's slot `matmul`; the ops matmul
// and linear, with their checks and their one backward closure each, are core/ops/linear.cpp): one
// oneDNN matmul primitive per (shapes, strides, dtype, bias), cached in core/dnnl_context.h.
// Transposed operands are never copied: a 2-D view with a unit stride in either dimension is
// described to oneDNN by its strides (row- or column-major with any leading dimension), so
// linear's w^T and the backward products' a^T, b^T, gy^T are free.
//
// NOTE: bf16/f16 need avx512 extensions in oneDNN 2.6. Without them (onednn::native_compute false) the
// operands are converted to f32 (exact for bf16), multiplied by the f32 primitive and the product is
// rounded to the input dtype: the values of a native kernel that accumulates in f32, at f32 speed
// plus the conversions.
//
// Tests: tests/core/linear_test.cpp, tests/gpu/ops_dispatch_test.cpp. Benchmark: `kiln bench matmul`,
// tools/bench/bench_ops.py.
#include "core/dnnl_context.h"
#include "core/ops/linear.h"

namespace kiln::cpu {

using dnnl::memory;

namespace {

using MatmulPrim = onednn::CachedPrimitive<dnnl::matmul>;

// A transposed view of a 2-D tensor, not recorded.
Tensor t2(const Tensor& t) {
  return make_view(t, {t.size(1), t.size(0)}, {t.strides()[1], t.strides()[0]}, t.offset());
}

// Strides oneDNN's matmul accepts for a (rows, cols) operand: row- or column-major, leading
// dimension at least the row/column length. Size-1 dims get a canonical stride. Empty when the
// view must be packed first.
Shape plain_strides(const Tensor& t) {
  int64_t r = t.size(0), c = t.size(1);
  int64_t sr = t.strides()[0], sc = t.strides()[1];
  if (r == 1) sr = sc == 1 ? c : 1;
  if (c == 1) sc = sr == 1 ? r : 1;
  if (sc == 1 && sr >= c) return {sr, 1};
  if (sr == 1 && sc >= r) return {1, sc};
  return {};
}

// Where the operand's strides are not expressible, a packed copy.
Tensor plain(const Tensor& t, Shape* strides) {
  *strides = plain_strides(t);
  if (!strides->empty()) return t;
  Tensor c = t.contiguous();
  *strides = c.strides();
  return c;
}

// a (M, K) @ b (K, N) [+ bias (N)] -> (M, N), contiguous, in the operands' (native) dtype.
Tensor mm_native(const Tensor& a0, const Tensor& b0, const Tensor& bias) {
  Shape sa, sb;
  Tensor a = plain(a0, &sa), b = plain(b0, &sb);
  int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  DType dt = a.dtype();
  Tensor y = Tensor::empty({m, n}, dt);
  if (m == 0 || n == 0) return y;
  if (k == 0) {  // an empty sum: zeros, plus the bias (broadcast over the rows)
    if (!bias.defined()) return y.fill_(0.0);
    return y.copy_(make_view(bias, {m, n}, {0, bias.strides()[0]}, bias.offset()));
  }
  onednn::SerialScope serial(2.0 * static_cast<double>(m) * static_cast<double>(k) * static_cast<double>(n) <
                             onednn::kSerialFlops);
  memory::data_type mdt = onednn::data_type(dt);
  memory::desc a_md({m, k}, mdt, memory::dims{sa[0], sa[1]});
  memory::desc b_md({k, n}, mdt, memory::dims{sb[0], sb[1]});
  memory::desc y_md({m, n}, mdt, memory::format_tag::ab);
  memory::desc bias_md({1, n}, mdt, memory::format_tag::ab);
  onednn::CacheKey key("matmul");
  key.add(Shape{m, k, n}).add(sa).add(sb).add(dt).add(bias.defined() ? 1 : 0);
  auto p = onednn::cache().get_or_create<MatmulPrim>(key, [&]() -> std::shared_ptr<const MatmulPrim> {
    try {
      auto d = bias.defined() ? dnnl::matmul::desc(a_md, b_md, bias_md, y_md) : dnnl::matmul::desc(a_md, b_md, y_md);
      return std::make_shared<const MatmulPrim>(dnnl::matmul::primitive_desc(d, onednn::attr(), onednn::engine()));
    } catch (const dnnl::error& e) {
      KILN_FAIL("matmul: oneDNN could not create a matmul for ", a0.str(), " @ ", b0.str(), ": ", e.what());
    }
  });
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, onednn::wrap(a_md, a)},
                                       {DNNL_ARG_WEIGHTS, onednn::wrap(b_md, b)},
                                       {DNNL_ARG_DST, onednn::wrap(y_md, y)}};
  if (bias.defined()) args.emplace(DNNL_ARG_BIAS, onednn::wrap(bias_md, bias));
  onednn::execute(p->prim, p->pd, std::move(args));
  return y;
}

// `t` in f32. A transposed packed tensor (linear's w^T, the backward's gy^T) stays a transposed
// view of a packed f32 copy, so the conversion is a flat loop and oneDNN still sees a transpose.
Tensor to_f32(const Tensor& t) {
  if (!t.defined() || t.dtype() == DType::f32) return t;
  if (t.dim() == 2 && t2(t).is_contiguous()) return t2(t2(t).to(DType::f32));
  return t.to(DType::f32);
}

}  // namespace

// op(a) @ op(b) [+ bias] in the operands' dtype, natively or through f32 when the CPU lacks the
// low-precision kernels; a transposed operand is a transposed view (t2), which oneDNN reads in place.
Tensor matmul(const Tensor& a0, const Tensor& b0, bool trans_a, bool trans_b, const Tensor& bias0) {
  Tensor a = trans_a ? t2(a0) : a0, b = trans_b ? t2(b0) : b0;
  Tensor bias = bias0.defined() ? bias0.contiguous() : Tensor();
  const DType out = a.dtype();
  if (onednn::native_compute(out)) return mm_native(a, b, bias);
  Tensor y = mm_native(to_f32(a), to_f32(b), to_f32(bias));
  return out == DType::f32 ? y : y.to(out);
}

}  // namespace kiln::cpu
