// matmul and linear on the CPU: one oneDNN matmul primitive per (shapes, strides, dtype, bias),
// cached in core/dnnl_context.h. Transposed operands are never copied: a 2-D view with a unit
// stride in either dimension is described to oneDNN by its strides (row- or column-major with any
// leading dimension), so linear's w^T and the backward products' a^T, b^T, gy^T are free.
//
//   matmul: y = a b            da = gy b^T      db = a^T gy
//   linear: y = x w^T + bias   dx = gy w        dw = gy^T x      dbias = sum over rows of gy
//
// NOTE: bf16/f16 need avx512 extensions in oneDNN 2.6. Without them (onednn::native_compute false) the
// operands are converted to f32 (exact for bf16), multiplied by the f32 primitive and the product is
// rounded to the input dtype: the values of a native kernel that accumulates in f32, at f32 speed
// plus the conversions.
//
// CUDA tensors: cuBLASLt (core/cuda/matmul_cuda.cu) with the transposes passed as flags, so no
// operand is copied there either: mm() below picks the device (core/ops/dispatch.h).
//
// Tests: tests/core/linear_test.cpp, tests/gpu/ops_dispatch_test.cpp. Benchmark: `kiln bench matmul`,
// tools/bench/bench_ops.py.
#include "core/ops/linear.h"

#include "core/autograd.h"
#include "core/dnnl_context.h"
#include "core/ops/dispatch.h"
#include "core/ops/reduce.h"

#ifdef KILN_WITH_CUDA
#include "core/cuda/cuda_ops.h"
#endif

namespace kiln::ops {

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
Tensor mm_native(const char* op, const Tensor& a0, const Tensor& b0, const Tensor& bias) {
  Shape sa, sb;
  Tensor a = plain(a0, &sa), b = plain(b0, &sb);
  int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  DType dt = a.dtype();
  Tensor y = Tensor::empty({m, n}, dt);
  if (m == 0 || n == 0) return y;
  if (k == 0) return y.fill_(0.0);
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
      KILN_FAIL(op, ": oneDNN could not create a matmul for ", a0.str(), " @ ", b0.str(), ": ", e.what());
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

// op(a) @ op(b) [+ bias] in dtype `out`, op = transpose where the flag is set. CUDA: cuBLASLt takes
// the flags. CPU: natively, or through f32 when the CPU lacks the low-precision kernels; a
// transposed operand is a transposed view (t2), which oneDNN reads in place.
Tensor mm(const char* op, const Tensor& a0, bool ta, const Tensor& b0, bool tb, const Tensor& bias, DType out) {
  if (op_on_cuda(op, {a0, b0, bias})) {
#ifdef KILN_WITH_CUDA
    return cuda::matmul(a0, b0, ta, tb, bias);
#endif
  }
  Tensor a = ta ? t2(a0) : a0, b = tb ? t2(b0) : b0;
  if (onednn::native_compute(out)) return mm_native(op, a, b, bias);
  Tensor y = mm_native(op, to_f32(a), to_f32(b), to_f32(bias));
  return out == DType::f32 ? y : y.to(out);
}

void check_operand(const char* op, const char* name, const Tensor& t) {
  KILN_CHECK(t.defined(), op, ": ", name, " is an undefined tensor");
  KILN_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::bf16 || t.dtype() == DType::f16, op, ": ", name, " ",
             t.str(), ": accepted dtypes are f32, bf16 and f16");
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_operand("matmul", "a", a);
  check_operand("matmul", "b", b);
  KILN_CHECK(a.dim() == 2 && b.dim() == 2, "matmul: a ", a.str(), " and b ", b.str(), " must both be 2-D");
  KILN_CHECK(a.size(1) == b.size(0), "matmul: a ", a.str(), " @ b ", b.str(), ": inner dimensions differ (", a.size(1),
             " vs ", b.size(0), ")");
  KILN_CHECK(a.dtype() == b.dtype(), "matmul: a ", a.str(), " and b ", b.str(), " must have the same dtype");
  DType dt = a.dtype();
  Tensor ad = a.detach(), bd = b.detach();
  Tensor y = mm("matmul", ad, false, bd, false, Tensor(), dt);
  bool ga = a.requires_grad(), gb = b.requires_grad();
  return record("matmul", {a, b}, y, [ad, bd, ga, gb, dt](const Tensor& gy0) {
    Tensor gy = gy0.dtype() == dt ? gy0 : gy0.to(dt);
    return grads{ga ? mm("matmul backward", gy, false, bd, true, Tensor(), dt) : Tensor(),
                 gb ? mm("matmul backward", ad, true, gy, false, Tensor(), dt) : Tensor()};
  });
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  check_operand("linear", "x", x);
  check_operand("linear", "weight", w);
  KILN_CHECK(x.dim() == 2, "linear: input x ", x.str(), " must be 2-D (N, in)");
  KILN_CHECK(w.dim() == 2, "linear: weight ", w.str(), " must be 2-D (out, in)");
  KILN_CHECK(x.size(1) == w.size(1), "linear: input x ", x.str(), " has ", x.size(1), " features but weight ", w.str(),
             " expects ", w.size(1));
  KILN_CHECK(x.dtype() == w.dtype(), "linear: input x ", x.str(), " and weight ", w.str(), " must have the same dtype");
  if (b.defined()) {
    check_operand("linear", "bias", b);
    KILN_CHECK(b.shape() == Shape{w.size(0)}, "linear: bias ", b.str(), " must have shape [", w.size(0),
               "] for weight ", w.str());
    KILN_CHECK(b.dtype() == x.dtype(), "linear: bias ", b.str(), " and input x ", x.str(), " must have the same dtype");
  }
  DType dt = x.dtype();
  Tensor xd = x.detach(), wd = w.detach();
  Tensor y = mm("linear", xd, false, wd, true, b.defined() ? b.detach().contiguous() : Tensor(), dt);
  bool gx = x.requires_grad(), gw = w.requires_grad(), gb = b.defined() && b.requires_grad();
  return record("linear", {x, w, b}, y, [xd, wd, gx, gw, gb, dt](const Tensor& gy0) {
    Tensor gy = gy0.dtype() == dt ? gy0 : gy0.to(dt);
    return grads{gx ? mm("linear backward", gy, false, wd, false, Tensor(), dt) : Tensor(),
                 gw ? mm("linear backward", gy, true, xd, false, Tensor(), dt) : Tensor(), gb ? sum(gy, {0}) : Tensor()};
  });
}

}  // namespace kiln::ops
