// Helpers for the GPU tests (label `gpu`): random inputs rounded to the tested dtype (so the CPU
// reference sees exactly the values the GPU sees), uploads, and close-to comparisons. Every test
// skips when no GPU is visible; the whole folder compiles to nothing but that skip in a CPU build.
#pragma once
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "tests/gradcheck.h"

#ifdef KILN_WITH_CUDA
#include "core/cuda/cuda_ops.h"
#endif

namespace kiln::gputest {

inline Device gpu() { return Device::cuda(0); }

// Sets KILN_CUDNN_FUSION for the scope (nullptr: unset) and restores it after.
class FusionEnv {
 public:
  explicit FusionEnv(const char* v) {
    if (const char* old = std::getenv("KILN_CUDNN_FUSION")) old_ = old;
    if (v) setenv("KILN_CUDNN_FUSION", v, 1);
    else unsetenv("KILN_CUDNN_FUSION");
  }
  ~FusionEnv() {
    if (old_) setenv("KILN_CUDNN_FUSION", old_->c_str(), 1);
    else unsetenv("KILN_CUDNN_FUSION");
  }

 private:
  std::optional<std::string> old_;
};

// Normal(0, std) values rounded to `dtype`, on the CPU.
inline Tensor rand_cpu(const Shape& s, uint64_t seed, DType dtype = DType::f32, double std = 1.0, double mean = 0.0) {
  Tensor t = testing::randn(s, seed, DType::f64, std);
  if (mean != 0.0) {
    std::vector<double> v = t.to_double_vector();
    for (double& x : v) x += mean;
    t = Tensor::from_vector(v, s, DType::f64);
  }
  return t.to(dtype);
}

inline std::vector<double> host(const Tensor& t) { return t.to_double_vector(); }

// Relative tolerance of one rounding to `dtype` (values of order 1, f32 math).
inline double rounding(DType t) { return t == DType::bf16 ? 8e-3 : t == DType::f16 ? 1e-3 : 1e-6; }

inline void expect_near_all(const Tensor& got, const std::vector<double>& want, double atol, double rtol,
                            const std::string& what) {
  ASSERT_TRUE(got.device().is_cuda()) << what << ": result is on " << got.device().str();
  testing::expect_close(got.to_double_vector(), want, atol, rtol, what);
}

// A fixture for comparisons with the CPU: convolutions without TF32 (its 10-bit mantissa would
// swamp the tolerances), the previous setting restored after each test.
class Tf32OffTest : public ::testing::Test {
 protected:
  void SetUp() override {
#ifdef KILN_WITH_CUDA
    if (cuda_device_count() > 0) {
      tf32_ = cuda::conv_allow_tf32();
      cuda::set_conv_allow_tf32(false);
    }
#endif
  }
  void TearDown() override {
#ifdef KILN_WITH_CUDA
    if (cuda_device_count() > 0) cuda::set_conv_allow_tf32(tf32_);
#endif
  }
  bool tf32_ = true;
};

// Ends the process with a message if the scope is not left within `seconds`: a test that could hang
// in a library (NCCL's bootstrap) fails loudly instead of eating the GPU machine's time.
class Watchdog {
 public:
  Watchdog(double seconds, std::string what) : what_(std::move(what)) {
    thread_ = std::thread([this, seconds] {
      std::unique_lock<std::mutex> lock(mu_);
      if (!cv_.wait_for(lock, std::chrono::duration<double>(seconds), [this] { return done_; })) {
        std::fprintf(stderr, "WATCHDOG: %s did not finish within %g s; exiting\n", what_.c_str(), seconds);
        std::fflush(stderr);
        std::_Exit(3);
      }
    });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  std::string what_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace kiln::gputest
