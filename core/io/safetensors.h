// The safetensors weight format (https://github.com/huggingface/safetensors), the one kiln writes
// checkpoints' weights in, so PyTorch (`safetensors.torch.load_file`) reads them directly:
//
//   [8 bytes: N, u64 little-endian] [N bytes: JSON header] [data]
//   header = {"<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//             "__metadata__": {"key": "value", ...}}      (optional, string -> string)
//
// Offsets are relative to the start of the data block; the tensors tile it exactly (no holes, no
// overlaps), as the reference implementation requires. Tensors are stored row-major, little-endian.
// dtypes: f32, f16, bf16, i32, i64, u8, f64 <-> "F32", "F16", "BF16", "I32", "I64", "U8", "F64".
// Tests: tests/core/safetensors_test.cpp (round trip, each corruption, a file written by PyTorch).
#pragma once
#include <map>
#include <string>

#include "core/tensor.h"

namespace kiln {

struct SafetensorsContents {
  std::map<std::string, Tensor> tensors;           // CPU, contiguous
  std::map<std::string, std::string> metadata;     // the "__metadata__" entry (empty when absent)
};

// Writes `tensors` (any device, any strides; copied to CPU and packed) to `path` atomically: the
// bytes go to `path + ".tmp"`, are fsync'ed, then renamed over `path`, so a crash leaves either the
// old file or the new one. The header is padded with spaces to a multiple of 8 bytes and tensors are
// laid out largest element size first, so every tensor's data is aligned to its element size.
void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads a safetensors file into CPU tensors. Every problem (truncated file, header length beyond
// the file, bad JSON, a field of the wrong type, unknown dtype, offsets out of range, overlapping
// or leaving holes, a size that does not match the shape) is a kiln::Error naming the file.
SafetensorsContents load_safetensors(const std::string& path);

// "F32" <-> DType; the second throws for dtypes kiln does not have, listing those it reads.
const char* safetensors_dtype_name(DType t);
DType parse_safetensors_dtype(const std::string& s);

}  // namespace kiln
