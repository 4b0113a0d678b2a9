// Device dispatch of the public ops. New ops, and those already moved, take their kernels from the
// device's kernel table (core/kernels.h; op_device() below finds the device). The ops not moved yet
// ask op_on_cuda() where their tensors live:
// false -> its CPU kernel (the op's *_cpu.cpp / .cpp), true -> the kiln::cuda function of
// core/cuda/cuda_ops.h, for the forward and in the backward closure alike. Tensors on different
// devices are an error naming the op and both devices; there is never a silent copy to another
// device. The pattern, in the forward and in the backward closure:
//
//   if (op_on_cuda("relu", {x})) {
//   #ifdef KILN_WITH_CUDA
//     return cuda::unary(cuda::UnaryOp::relu, x.detach());
//   #endif
//   }
//   ...CPU kernel...
//
// A build without CUDA cannot create a CUDA tensor; op_on_cuda() throws there if one shows up
// anyway, so the empty branch is never taken.
// Tests: tests/core/*_test.cpp (CPU), tests/gpu/ops_dispatch_test.cpp (CUDA against CPU).
#pragma once
#include <initializer_list>

#include "core/tensor.h"

namespace kiln::ops {

// The device shared by the defined tensors of `ts` (CPU when none is defined). Throws
// "<op>: tensors on different devices: <a> and <b>; move them to one device with .to(device)".
Device op_device(const char* op, std::initializer_list<Tensor> ts);

// True when the op's tensors are on a GPU (then the caller runs its CUDA kernel).
inline bool op_on_cuda(const char* op, std::initializer_list<Tensor> ts) { return op_device(op, ts).is_cuda(); }

}  // namespace kiln::ops
