// The CPU convolution algorithm per shape and pass, chosen by measurement (like cuDNN's benchmark
// mode): the first time conv2d's CPU kernel (core/cpu/conv2d.cpp) meets a shape, each applicable candidate
// of each pass (forward, backward-data, backward-weights) runs once untimed and a few times timed on
// the actual operands, and the fastest is kept for the process and, by default, in a JSON file on
// disk keyed by the machine (CPU model and flags, oneDNN version), each entry by its thread count:
// processes of different thread counts share the file, each using its own entries.
//
// Candidates: oneDNN's direct kernels (always), Winograd F(2x2,3x3) (3x3 / stride 1 / pad 1, all
// three passes) and the im2col GEMM (3x3 weight gradient without bias), core/cpu/winograd.h; and
// `blocked`, oneDNN's direct kernels on the blocked view (nChw16c / nChw8c) of NHWC tensors whose
// input and output channels are both 16 or both 8, the same bytes (core/cpu/conv2d.cpp).
//
// Environment (read once):
//   KILN_CONV_ALGO=auto (default: measure) | heuristic (the static rule of winograd::chosen() and
//     im2col_chosen(), tuned to one CPU) | direct | winograd (forced where applicable).
//   KILN_CONV_CACHE=PATH (the disk cache; default $XDG_CACHE_HOME/kiln/conv_algo.json, else
//     $HOME/.cache/kiln/conv_algo.json) | off (no disk cache: every process measures again).
// A cache file that does not parse, or was written on another machine / oneDNN, is ignored with one
// warning (a format-1 file, the thread count in its machine, is still read); an entry naming an
// algorithm that does not apply to its shape is measured again. See docs/conv_algorithms.md. Tests: tests/core/conv_algo_test.cpp.
// The policy that tools and tests set and read (mode, candidates left out, what was measured, the
// disk cache) is declared in core/conv_policy.h, which this header includes; here, what conv2d's
// CPU kernel uses to choose.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/conv_policy.h"
#include "core/dtype.h"

namespace kiln::ops::conv_algo {

// What a convolution's speed depends on: x (n, h, w, c), w (k, kh, kw, c/groups), its geometry,
// dtype and bias.
struct ConvKey {
  int64_t n = 0, h = 0, w = 0, c = 0, k = 0, kh = 0, kw = 0;
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dil_h = 1, dil_w = 1, groups = 1;
  DType dtype = DType::f32;
  bool bias = false;
  double flops() const;     // multiply-adds x 2 of the forward pass
  std::string str() const;  // "n128 h32 w32 c64 k64 3x3 s1x1 p1x1 d1x1 g1 bf16 nobias": the cache key
};

// The algorithms that can run `pass` of this convolution, direct first, less those excluded.
std::vector<Algo> applicable(const ConvKey& key, Pass pass);

struct Candidate {
  Algo algo;
  std::function<void()> run;  // one run of the pass (its result is discarded)
};

// The algorithm for `pass` of `key` among `candidates` (non-empty, direct first) under mode():
// measured once per (key, pass) (if key.flops() >= kMinMeasureFlops) and cached, thread-safe (two threads that measure the same shape
// at once both keep the first stored answer). `heuristic_pick` is the static rule's answer, used
// in the heuristic mode. Forced modes take their algorithm where it is a candidate, else direct.
Algo choose(const ConvKey& key, Pass pass, const std::vector<Candidate>& candidates, Algo heuristic_pick);

// Smaller convolutions are not measured: they follow the static rule (their timings are mostly
// noise and what they could gain is negligible).
constexpr double kMinMeasureFlops = 2e7;

// The fastest of `times`; the first (direct) keeps the place unless another is at least
// kMargin faster: choices within the noise then stay on the default, the same in every process.
constexpr double kMargin = 0.03;
Algo fastest(const std::vector<Timing>& times);

// Times one candidate in ms. Default: `warmup()` untimed runs then `reps()` timed runs, the
// fastest of them; a candidate whose untimed run already took 3x the best so far is not run again.
// Tests inject fake timings here (nullptr restores the clock).
using Timer = std::function<double(const Candidate&, double best_ms_so_far)>;
void set_timer(Timer t);

// The disk cache (core/conv_policy.h's cache_path()): load_cache() reads it into the process cache
// (done on first use of the automatic mode); a file that cannot be trusted is ignored with a
// warning and false; only the entries of this process's OpenMP thread count are taken. Measuring a
// shape merges this process's measurements into the file, beside every thread count's (written to a
// temporary, then renamed).
bool load_cache();
// Where warnings go (default: one line on stderr); for tests.
void set_warning_sink(std::function<void(const std::string&)> sink);

}  // namespace kiln::ops::conv_algo
