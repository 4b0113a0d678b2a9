// Device dispatch of the public ops: op_device() finds the device an op's tensors share, and the op
// takes its kernels for that device from its kernel slots (core/kernel_slot.h, docs/adding_an_op.md).
// Tensors on different devices are an error naming the op and both devices; there is never a silent
// copy to another device. A build without CUDA cannot create a CUDA tensor; op_device() throws there
// if one shows up anyway (check_available: "<op>: device cuda:0 is not available: kiln was built
// without CUDA").
// Tests: tests/core/*_test.cpp (CPU), tests/gpu/ops_dispatch_test.cpp (CUDA against CPU).
#pragma once
#include <initializer_list>

#include "core/tensor.h"

namespace kiln::ops {

// The device shared by the defined tensors of `ts` (CPU when none is defined). Throws
// "<op>: tensors on different devices: <a> and <b>; move them to one device with .to(device)".
Device op_device(const char* op, std::initializer_list<Tensor> ts);

}  // namespace kiln::ops
