// The CPU convolution algorithm per shape and pass, chosen by measurement (like cuDNN's benchmark
// mode): the first time conv2d's CPU kernel (core/cpu/conv2d.cpp) meets a shape, each applicable candidate
// of each pass (forward, backward-data, backward-weights) runs once untimed and a few times timed on
// the actual operands, and the fastest is kept for the process and, by default, in a JSON file on
// disk keyed by the machine (CPU model and flags, thread count, oneDNN version).
//
// Candidates: oneDNN's direct kernels (always), Winograd F(2x2,3x3) (3x3 / stride 1 / pad 1, all
// three passes) and the im2col GEMM (3x3 weight gradient without bias), core/cpu/winograd.h.
//
// Environment (read once):
//   KILN_CONV_ALGO=auto (default: measure) | heuristic (the static rule of winograd::chosen() and
//     im2col_chosen(), tuned to one CPU) | direct | winograd (forced where applicable).
//   KILN_CONV_CACHE=PATH (the disk cache; default $XDG_CACHE_HOME/kiln/conv_algo.json, else
//     $HOME/.cache/kiln/conv_algo.json) | off (no disk cache: every process measures again).
// A cache file that does not parse, or was written on another machine / thread count / oneDNN, is
// ignored with one warning; an entry naming an algorithm that does not apply to its shape is
// measured again. See docs/conv_algorithms.md. Tests: tests/core/conv_algo_test.cpp.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace kiln::ops::conv_algo {

// How conv2d picks its algorithms. `automatic` measures; `heuristic` keeps the former static rule.
enum class Mode { automatic, direct, winograd, heuristic };
Mode mode();         // KILN_CONV_ALGO on first use
void set_mode(Mode m);  // for tests and benchmarks; not thread-safe against running convolutions
Mode parse_mode(const std::string& s, const std::string& what);  // throws naming `what` and the accepted values
const char* mode_name(Mode m);

enum class Algo { direct, winograd, im2col };
enum class Pass { forward, backward_data, backward_weights };
const char* algo_name(Algo a);
const char* pass_name(Pass p);

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

// Candidates left out (default none; direct cannot be): for in-process A/B timings of what one
// candidate is worth (`kiln bench train conv_algo=auto,auto-im2col`). Choices measured with some
// left out are cached, in the process and on disk, under the key plus " -NAME" for each, apart
// from the full set's. Not thread-safe against running convolutions.
void set_excluded(const std::vector<Algo>& algos);
std::vector<Algo> excluded();

struct Candidate {
  Algo algo;
  std::function<void()> run;  // one run of the pass (its result is discarded)
};
struct Timing {
  Algo algo;
  double ms;
};
struct Choice {
  Algo algo = Algo::direct;
  std::vector<Timing> times;  // empty when it was not measured (forced, heuristic, one candidate)
  bool from_disk = false;
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

// Everything measured or loaded in this process, in the order it was first seen.
struct Entry {
  std::string key;  // ConvKey::str()
  Pass pass;
  Choice choice;
};
std::vector<Entry> entries();
struct Stats {
  int64_t measured = 0;      // (shape, pass) pairs timed in this process
  int64_t from_disk = 0;     // answered by the disk cache
  double measure_seconds = 0;  // wall time spent timing candidates
};
Stats stats();
// "conv_algo: 17 (shape, pass) pairs measured in 7.9 s, 0 from the disk cache (PATH)\n" the
// first time it is called after something was measured or read from disk, "" otherwise and
// afterwards: the trainer prints it after its first epoch.
std::string report_once();
// Forgets the process cache and statistics (the disk file stays); for tests and benchmarks.
void reset();

// The disk cache: its path ("" when off), set_cache_path("") turns it off. load_cache() reads it
// into the process cache (done on first use of the automatic mode); a file that cannot be
// trusted is ignored with a warning and false. save_cache() merges this process's measurements
// into the file (written to a temporary, then renamed).
std::string cache_path();
void set_cache_path(const std::string& path);
bool load_cache();
void save_cache();
// The machine a cache file belongs to: CPU model and ISA flags, OpenMP threads, oneDNN version.
std::string machine_id();
// Where warnings go (default: one line on stderr); for tests.
void set_warning_sink(std::function<void(const std::string&)> sink);

}  // namespace kiln::ops::conv_algo
