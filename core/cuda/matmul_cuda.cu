// Row-major matrix products on cuBLASLt. cuBLASLt is column-major, and a row-major (r, c) matrix
// with leading dim ld is the column-major (c, r) matrix with the same ld, so C = op(A) op(B)
// (row-major, M x N) is computed as C^T = op(B)^T op(A)^T: cuBLASLt's "A" is our b, its "B" our a,
// m = N, n = M. A transposed view (strides (1, ld)) is taken as-is by flipping its transpose flag.
// f32 (TF32 when allowed), f16 and bf16 with f32 accumulation; the optional bias rides the
// BIAS epilogue (a vector over cuBLASLt's rows = our columns). Descriptors and the heuristic's
// first algorithm are cached per {shape, transposes, leading dims, dtype, bias, pointer alignment};
// the workspace is the device's 32 MiB cuBLASLt buffer. When the heuristic has nothing (tiny or odd
// problems, e.g. 1x1x1 with a bias), the plan falls back to cuBLASLt without the epilogue, then to
// cublasGemmEx, the bias then added by the elementwise kernel; the choice is cached with the plan
// (MatmulPath in cuda_ops.h). matmul() is the kernel of matmul_kernel (core/ops/linear.h; the ops are
// core/ops/linear.cpp). Tests: tests/gpu/matmul_test.cpp.
#include <array>
#include <atomic>
#include <climits>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include <cublas_v2.h>

#include "core/cuda/cuda_ops.h"
#include "core/cuda/kernel_util.cuh"

namespace kiln::cuda {
namespace {

// A matrix as cuBLASLt will see it: stored row-major (rows, cols) with leading dim ld, used transposed or not.
struct Operand {
  const void* ptr = nullptr;
  int64_t rows = 0, cols = 0, ld = 0;
  bool trans = false;
  Tensor keep;  // a packed copy when the input's strides were not usable
};

Operand as_operand(const Tensor& t, bool trans) {
  Operand o;
  int64_t r = t.size(0), c = t.size(1), s0 = t.strides()[0], s1 = t.strides()[1];
  if ((s1 == 1 || c == 1) && s0 >= std::max<int64_t>(c, 1)) {
    o = {t.raw_data(), r, c, std::max<int64_t>(s0, 1), trans, Tensor()};
  } else if ((s0 == 1 || r == 1) && s1 >= std::max<int64_t>(r, 1)) {  // a transposed row-major matrix
    o = {t.raw_data(), c, r, std::max<int64_t>(s1, 1), !trans, Tensor()};
  } else {
    Tensor p = packed(t);
    o = {p.raw_data(), r, c, std::max<int64_t>(c, 1), trans, p};
  }
  return o;
}

uint32_t alignment(const void* p) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al != 0) al >>= 1;
  return al;
}

struct Plan {
  MatmulPath path = MatmulPath::lt_epilogue;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
};

void destroy_lt(Plan& p) {
  if (p.la) cublasLtMatrixLayoutDestroy(p.la);
  if (p.lb) cublasLtMatrixLayoutDestroy(p.lb);
  if (p.ld) cublasLtMatrixLayoutDestroy(p.ld);
  if (p.desc) cublasLtMatmulDescDestroy(p.desc);
  p.la = p.lb = p.ld = nullptr;
  p.desc = nullptr;
}

using Key = std::array<int64_t, 16>;

struct Cache {
  std::mutex mu;
  std::map<Key, Plan> plans;
  MatmulPath last = MatmulPath::lt_epilogue;
};

Cache& cache(int device) { return per_device<Cache>(device); }

std::atomic<int> g_first_path{static_cast<int>(MatmulPath::lt_epilogue)};

// The fallback's cuBLAS handle, bound to the device's stream (created on first use).
struct GemmHandle {
  std::once_flag once;
  cublasHandle_t handle = nullptr;
};
cublasHandle_t gemm_handle(int device) {
  GemmHandle& h = per_device<GemmHandle>(device);
  std::call_once(h.once, [&] {
    DeviceGuard g(device);
    cublasHandle_t hd = nullptr;
    CUBLAS_CHECK(cublasCreate(&hd));
    CUBLAS_CHECK(cublasSetStream(hd, stream_of(device)));
    h.handle = hd;
  });
  return h.handle;
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    default: KILN_FAIL("matmul: dtype ", dtype_name(t), " is not supported on CUDA; accepted: f32, f16, bf16");
  }
}

cublasComputeType_t compute_type(DType dt, bool tf32) {
  return (dt == DType::f32 && tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

std::string describe(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  return a.str() + (ta ? "^T" : "") + " x " + b.str() + (tb ? "^T" : "");
}

// cuBLASLt descriptors and the heuristic's first usable algorithm, with or without the bias
// epilogue. False (nothing left allocated) when the heuristic offers no algorithm.
bool try_lt(int device, Plan& p, const Operand& la_src /* cuBLASLt A = our b */, const Operand& lb_src /* = our a */,
            int64_t M, int64_t N, DType dt, const void* bias, const void* d_ptr, bool tf32) {
  const LtHandle& lt = cublaslt(device);
  cudaDataType_t ct = cuda_type(dt);
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, compute_type(dt, tf32), CUDA_R_32F));
  try {
    cublasOperation_t opa = la_src.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t opb = lb_src.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));
    if (bias) {
      cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    }
    // Column-major layouts: a row-major (rows, cols) matrix is (cols, rows) here.
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.la, ct, la_src.cols, la_src.rows, la_src.ld));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.lb, ct, lb_src.cols, lb_src.rows, lb_src.ld));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.ld, ct, N, M, N));

    cublasLtMatmulPreference_t pref = nullptr;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = lt.workspace_bytes;
    uint32_t al_a = alignment(la_src.ptr), al_b = alignment(lb_src.ptr), al_d = alignment(d_ptr);
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a));
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b));
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof(al_d));
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof(al_d));
    cublasLtMatmulHeuristicResult_t results[8] = {};
    int returned = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulAlgoGetHeuristic(lt.handle, p.desc, p.la, p.lb, p.ld, p.ld, pref, 8, results, &returned);
    cublasLtMatmulPreferenceDestroy(pref);
    // NOTE: "no algorithm" comes back as CUBLAS_STATUS_NOT_SUPPORTED with returned == 0: not an error here.
    KILN_CHECK(st == CUBLAS_STATUS_SUCCESS || st == CUBLAS_STATUS_NOT_SUPPORTED,
               "cublasLtMatmulAlgoGetHeuristic failed: ", cublasLtGetStatusName(st), " (", cublasLtGetStatusString(st), ")");
    for (int i = 0; st == CUBLAS_STATUS_SUCCESS && i < returned; ++i)
      if (results[i].state == CUBLAS_STATUS_SUCCESS && results[i].workspaceSize <= ws) {
        p.algo = results[i].algo;
        p.workspace = results[i].workspaceSize;
        p.path = bias ? MatmulPath::lt_epilogue : MatmulPath::lt_then_bias;
        return true;
      }
  } catch (...) {
    destroy_lt(p);
    throw;
  }
  destroy_lt(p);
  return false;
}

// The plan for one problem, trying the paths in order from `first` (see cuda_ops.h).
Plan make_plan(int device, const Operand& la_src, const Operand& lb_src, int64_t M, int64_t N, int64_t K, DType dt,
               const void* bias, const void* d_ptr, bool tf32, MatmulPath first, const std::string& what) {
  Plan p;
  if (first == MatmulPath::lt_epilogue && bias && try_lt(device, p, la_src, lb_src, M, N, dt, bias, d_ptr, tf32))
    return p;
  if (first != MatmulPath::gemm_ex && try_lt(device, p, la_src, lb_src, M, N, dt, nullptr, d_ptr, tf32)) return p;
  const int64_t lim = INT32_MAX;
  KILN_CHECK(M <= lim && N <= lim && K <= lim && la_src.ld <= lim && lb_src.ld <= lim, "matmul ", what,
             ": cuBLASLt has no algorithm for this problem (M=", M, ", N=", N, ", K=", K, ", dtype ", dtype_name(dt),
             ") and it is too large for the cublasGemmEx fallback (dims and leading dims must be below 2^31)");
  p.path = MatmulPath::gemm_ex;
  return p;
}

// C^T = op(B)^T op(A)^T in column-major terms, as cuBLASLt's call (see the file comment).
void run_gemm_ex(int device, const Operand& ob, const Operand& oa, int64_t M, int64_t N, int64_t K, DType dt, bool tf32,
                 void* out) {
  cudaDataType_t ct = cuda_type(dt);
  float alpha = 1.f, beta = 0.f;
  CUBLAS_CHECK(cublasGemmEx(gemm_handle(device), ob.trans ? CUBLAS_OP_T : CUBLAS_OP_N, oa.trans ? CUBLAS_OP_T : CUBLAS_OP_N,
                            static_cast<int>(N), static_cast<int>(M), static_cast<int>(K), &alpha, ob.ptr, ct,
                            static_cast<int>(ob.ld), oa.ptr, ct, static_cast<int>(oa.ld), &beta, out, ct,
                            static_cast<int>(N), compute_type(dt, tf32), CUBLAS_GEMM_DEFAULT));
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, const Tensor& bias) {
  int device = same_device("matmul", {&a, &b, &bias});
  std::string what = describe(a, b, trans_a, trans_b);
  KILN_CHECK(a.dim() == 2 && b.dim() == 2, "matmul ", what, ": both operands must be 2-D");
  KILN_CHECK(a.dtype() == b.dtype(), "matmul ", what, ": dtypes differ");
  cuda_type(a.dtype());
  int64_t M = trans_a ? a.size(1) : a.size(0), K = trans_a ? a.size(0) : a.size(1);
  int64_t Kb = trans_b ? b.size(1) : b.size(0), N = trans_b ? b.size(0) : b.size(1);
  KILN_CHECK(K == Kb, "matmul ", what, ": inner dims ", K, " and ", Kb, " differ");
  if (bias.defined())
    KILN_CHECK(bias.dim() == 1 && bias.size(0) == N && bias.dtype() == a.dtype(), "matmul ", what, ": bias ",
               bias.str(), " must be (", N, ") of the operands' dtype");
  Tensor out = empty_on({M, N}, a.dtype(), a);
  if (M == 0 || N == 0) return out;
  if (K == 0) {  // an empty sum: zeros (plus the bias)
    out.zero_();
    return bias.defined() ? binary(BinaryOp::add, out, bias) : out;
  }
  Operand oa = as_operand(a, trans_a), ob = as_operand(b, trans_b);
  Tensor bias_p = bias.defined() ? packed(bias) : Tensor();
  const void* bias_ptr = bias_p.defined() ? bias_p.raw_data() : nullptr;
  bool tf32 = matmul_allow_tf32();
  const MatmulPath first = static_cast<MatmulPath>(g_first_path.load());
  Key key = {M, N, K, ob.trans, oa.trans, ob.ld, oa.ld, static_cast<int64_t>(a.dtype()), bias_ptr != nullptr,
             tf32, alignment(ob.ptr), alignment(oa.ptr), alignment(out.raw_data()),
             bias_ptr ? alignment(bias_ptr) : 0, static_cast<int64_t>(first), 0};
  DeviceGuard g(device);
  const LtHandle& lt = cublaslt(device);
  Cache& c = cache(device);
  MatmulPath path;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.plans.find(key);
    if (it == c.plans.end())
      it = c.plans.emplace(key, make_plan(device, ob, oa, M, N, K, a.dtype(), bias_ptr, out.raw_data(), tf32, first,
                                          what)).first;
    Plan& p = it->second;
    if (p.path != MatmulPath::gemm_ex) {
      if (p.path == MatmulPath::lt_epilogue)
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr,
                                                    sizeof(bias_ptr)));
      float alpha = 1.f, beta = 0.f;
      cublasStatus_t st = cublasLtMatmul(lt.handle, p.desc, &alpha, ob.ptr, p.la, oa.ptr, p.lb, &beta, out.raw_data(),
                                         p.ld, out.raw_data(), p.ld, &p.algo, lt.workspace, lt.workspace_bytes,
                                         stream_of(device));
      if (st == CUBLAS_STATUS_NOT_SUPPORTED) {  // the heuristic's algorithm refused the problem: fall back for good
        destroy_lt(p);
        p.path = MatmulPath::gemm_ex;
      } else if (st != CUBLAS_STATUS_SUCCESS) {
        detail::throw_cublas(st, ("cublasLtMatmul (" + what + ")").c_str(), __FILE__, __LINE__);
      }
    }
    if (p.path == MatmulPath::gemm_ex) run_gemm_ex(device, ob, oa, M, N, K, a.dtype(), tf32, out.raw_data());
    path = p.path;
    c.last = path;
  }
  if (bias_ptr && path != MatmulPath::lt_epilogue) return binary(BinaryOp::add, out, bias_p);
  return out;
}

MatmulPath last_matmul_path(int device) {
  Cache& c = cache(device);
  std::lock_guard<std::mutex> lock(c.mu);
  return c.last;
}

void set_matmul_first_path(MatmulPath first) { g_first_path = static_cast<int>(first); }

}  // namespace kiln::cuda
