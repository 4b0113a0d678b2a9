// What the `kiln bench` commands share (tools/cli/bench.cpp defines it; tools/cli/bench_fusion.cpp
// uses it too): integer arguments, timing, syncing on a device, the devices to run on.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "tools/cli/commands.h"

namespace kiln::cli {

// key=value arguments with integer values (tools/cli/kv_args.h); unknown keys are errors that list the
// accepted ones. warmup, cudnn_benchmark, profile and paced may be 0, the others must be >= 1.
std::map<std::string, int64_t> parse_int_args(const char* cmd, const Args& args, std::map<std::string, int64_t> defs);

// Milliseconds per call of `step`, after `warmup` untimed calls. `sync` waits for the device.
// `blocked_s` (optional) gets the time the host spent blocked in CUDA calls during the timed steps
// (core/host_wait.h), not counting the final sync that ends the measurement.
double time_ms(const std::function<void()>& step, const std::function<void()>& sync, int64_t warmup, int64_t iters,
               double* blocked_s = nullptr, const std::function<void(bool)>& profile = nullptr);

// Waits for `t`'s device by reading one element back to the host.
void sync_on(const Tensor& t);

// The devices to run on: `device=...` (taken out of args) or the CPU and every visible GPU.
std::vector<Device> bench_devices(Args& args);

// tools/cli/bench_fusion.cpp: `kiln bench bn_relu` and `kiln bench conv_fusion`.
int bench_bn_relu(const Args& in);
int bench_conv_fusion(const Args& in);

}  // namespace kiln::cli
