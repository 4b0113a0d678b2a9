// Winograd F(2x2, 3x3) convolution on the CPU, for 3x3 / stride 1 / pad 1 / dilation 1 / one group,
// with or without bias, NHWC activations and ohwi weights (kiln's layouts), f32 or bf16.
//
// Each 2x2 output tile is computed from a 4x4 input tile as A^T [(G g G^T) . (B^T d B)] A, so the
// 9 multiply-adds per output pixel and channel pair become 16/4 = 4: 2.25x fewer. The channel
// contraction becomes 16 batched GEMMs (one per tile position, oneDNN's matmul, f32 accumulation
// and f32 results), between an input transform and an output transform that are additions only.
// Backward-data is the same convolution of dy with the weights rotated by 180 degrees and their
// channels swapped; backward-weights is G^T [sum over tiles (A dy A^T) . (B^T x B)] G, again 16
// GEMMs. The work is cut into chunks of tiles: where a chunk of 128+ tiles fits a core's L2 (few
// channels, large images: most of the transform traffic) each thread takes whole chunks and runs
// transform, GEMM and inverse transform on its own data; otherwise chunks of about 8 MiB are
// processed one after the other with all threads in each step (the GEMM dominates there).
//
// Numerics: the transforms are computed in f32 from the stored values; transformed tiles are
// stored in the operand dtype (bf16 rounds them once, like the operands of a direct bf16 conv),
// GEMMs accumulate in f32 and the output transform runs in f32 before the single rounding of the
// result. Tests (tests/core/winograd_test.cpp) bound the error against an f32 direct convolution.
//
// conv2d's CPU kernel (core/cpu/conv2d.cpp) takes this path where core/cpu/conv_algo.h chooses it;
// `kiln bench winograd` prints the candidates' times and the choices layer by layer. See
// docs/conv_algorithms.md and docs/precision.md.
#pragma once
#include <cstdint>

#include "core/cpu/conv_algo.h"
#include "core/tensor.h"

namespace kiln::ops::winograd {

// Which algorithm conv2d uses: KILN_CONV_ALGO, read once (core/cpu/conv_algo.h). automatic
// measures per shape and pass; heuristic follows chosen() / im2col_chosen() below; direct never
// takes Winograd or im2col; winograd takes Winograd wherever it applies.
using Mode = conv_algo::Mode;
using conv_algo::mode;
using conv_algo::set_mode;

// Scratch per shared chunk (default 8 MiB; at least 128 tiles per chunk) and per thread for
// thread-private chunks (default 1.5 MiB). Tuning and test knobs.
void set_chunk_bytes(int64_t bytes);
void set_private_bytes(int64_t bytes);
// The transform kernels' instruction set: AVX-512 where the CPU has AVX-512 BF16, else AVX2, else
// portable loops (the default: the best the CPU has; KILN_WINOGRAD_SIMD=portable|avx2 asks for
// less). The levels give the same bits (NaN payloads aside). set_simd() is false, changing
// nothing, for a level the CPU lacks. For tests and comparisons.
enum class Simd { portable = 0, avx2 = 1, avx512 = 2 };
bool set_simd(Simd level);
Simd simd();

// The geometry Winograd F(2x2,3x3) covers.
bool applicable(int64_t kh, int64_t kw, int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w,
                int64_t dil_h, int64_t dil_w, int64_t groups, bool bias, DType dtype);
// The static rule (tuned to one CPU, AVX-512 BF16): whether Winograd should run an applicable
// convolution of ic to oc channels; under mode() direct false, winograd true. conv2d follows it
// in the heuristic and forced modes; the automatic mode measures instead.
bool chosen(int64_t ic, int64_t oc, DType dtype);

// x (N, H, W, C), w (K, 3, 3, C) [+ b (K)] -> y (N, H, W, K). Contiguous CPU tensors of one dtype
// (f32, bf16); the bias is added in f32 before the result's rounding.
Tensor forward(const Tensor& x, const Tensor& w, const Tensor& b = Tensor());
// gy (N, H, W, K), w (K, 3, 3, C) -> gx (N, H, W, C).
Tensor backward_data(const Tensor& gy, const Tensor& w);
// gy (N, H, W, K), x (N, H, W, C) -> gw (K, 3, 3, C).
Tensor backward_weights(const Tensor& gy, const Tensor& x);

// Backward-weights of a strided 3x3 convolution as one GEMM (not Winograd, which needs stride 1):
// gw (K, 3x3xC) = gy^T (K x N*OH*OW) . im2col(x) (N*OH*OW x 3x3xC), over chunks of output pixels,
// f32 accumulation. For ResNet's stride-2 3x3 convolutions oneDNN 2.6's backward-weights kernel
// reaches a quarter of the GEMM's rate. The static rule im2col_chosen(): 3x3, stride 2, pad 1,
// 64+ channels each side, AVX-512 BF16, mode() not direct; the automatic mode measures instead.
bool im2col_chosen(int64_t kh, int64_t kw, int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w,
                   int64_t dil_h, int64_t dil_w, int64_t groups, int64_t ic, int64_t oc, DType dtype);
// gy (N, OH, OW, K), x (N, H, W, C) -> gw (K, 3, 3, C) for a 3x3 kernel with the given stride and pad.
Tensor im2col_backward_weights(const Tensor& gy, const Tensor& x, int64_t stride, int64_t pad);

// A convolution as im2col + one GEMM per chunk of whole images, for any kernel (dilation 1, one
// group, no bias), f32 or bf16. Where oneDNN 2.6's direct kernels are slow (on the AMX Xeon its
// backward-data of ResNet-18's last stride-2 3x3 convolution, 8x8x256 -> 4x4x512, runs at a
// tenth of a GEMM's rate) the automatic mode measures it as the candidate "im2col".
// x (N, H, W, C), w (K, KH, KW, C) -> y (N, OH, OW, K): y = im2col(x) . w^T, written in x's dtype.
Tensor im2col_forward(const Tensor& x, const Tensor& w, int64_t stride_h, int64_t stride_w, int64_t pad_h,
                      int64_t pad_w);
// gy (N, OH, OW, K), w (K, KH, KW, C) -> gx (x_shape): dcol = gy . w in f32, then each input pixel
// sums the dcol entries it fed (a gather within the chunk's images), rounded once.
Tensor im2col_backward_data(const Tensor& gy, const Tensor& w, const Shape& x_shape, int64_t stride_h,
                            int64_t stride_w, int64_t pad_h, int64_t pad_w);

}  // namespace kiln::ops::winograd
