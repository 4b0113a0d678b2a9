// The convolution algorithm policy that code above core/ sets and reads (the trainer, `kiln bench`,
// tests), device-neutral: the mode (KILN_CONV_ALGO: measure, the static rule, or one forced
// algorithm), candidates left out for A/B timings, what was measured in this process, and the disk
// cache of measured choices. The choices are those of the CPU's conv2d kernel (oneDNN's direct
// kernels, Winograd F(2x2,3x3), im2col + GEMM, direct on a blocked view); implemented in core/cpu/conv_algo.cpp, whose
// header core/cpu/conv_algo.h (the chooser conv2d's CPU kernel calls) includes this one. A GPU's
// convolution library chooses its own algorithms: cuDNN's benchmark mode is core/device.h's
// set_conv_benchmark. See docs/conv_algorithms.md. Tests: tests/core/conv_algo_test.cpp,
// tests/cli/bench_test.cpp.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::ops::conv_algo {

// How conv2d picks its algorithms. `automatic` measures; `heuristic` keeps the former static rule.
enum class Mode { automatic, direct, winograd, heuristic };
Mode mode();         // KILN_CONV_ALGO on first use
void set_mode(Mode m);  // for tests and benchmarks; not thread-safe against running convolutions
Mode parse_mode(const std::string& s, const std::string& what);  // throws naming `what` and the accepted values

// `blocked`: oneDNN's direct kernels on a view of the NHWC tensors in oneDNN's blocked layout
// (nChw16c, nChw8c), offered where the two are the same bytes: input and output channels equal to
// the block (core/cpu/conv2d.cpp).
enum class Algo { direct, winograd, im2col, blocked };
enum class Pass { forward, backward_data, backward_weights };
const char* algo_name(Algo a);
const char* pass_name(Pass p);

// Candidates left out (default none; direct cannot be): for in-process A/B timings of what one
// candidate is worth (`kiln bench train conv_algo=auto,auto-im2col`). Choices measured with some
// left out are cached, in the process and on disk, under the key plus " -NAME" for each, apart
// from the full set's. Not thread-safe against running convolutions.
void set_excluded(const std::vector<Algo>& algos);
std::vector<Algo> excluded();

struct Timing {
  Algo algo;
  double ms;
};
struct Choice {
  Algo algo = Algo::direct;
  std::vector<Timing> times;  // empty when it was not measured (forced, heuristic, one candidate)
  bool from_disk = false;
};

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
// first time it is called after something was measured (a run whose pairs all came from the disk
// cache has no cost to report), "" otherwise and afterwards: the trainer prints it after its first epoch.
std::string report_once();
// Forgets the process cache and statistics (the disk file stays); for tests and benchmarks.
void reset();

// The disk cache: its path ("" when off); set_cache_path("") turns it off (core/cpu/conv_algo.h's
// load_cache() reads it; measuring a shape writes it).
std::string cache_path();
void set_cache_path(const std::string& path);
// The machine and thread count a measurement belongs to: CPU model and ISA flags, OpenMP threads, oneDNN
// version (the cache file's "machine" is this without the threads; each entry has its own count).
std::string machine_id();

}  // namespace kiln::ops::conv_algo
