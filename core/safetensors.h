// core/safetensors.h — StateDict <-> .safetensors files (huggingface/safetensors format), so a
// mixtape checkpoint opens in PyTorch, JAX or any other safetensors reader, and theirs open here.
//
// The format (as the reference implementation writes it):
//   bytes [0, 8)       N, the header length, u64 little-endian
//   bytes [8, 8+N)     a UTF-8 JSON object, padded with spaces so that 8+N is a multiple of 8:
//                        {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]},
//                         ..., "__metadata__": {"key": "value", ...}}     (metadata optional)
//   bytes [8+N, EOF)   the data: each tensor's elements, row-major, little-endian, at
//                      [begin, end) relative to the start of the data.
// Dtypes: F64 F32 F16 BF16 F8_E4M3 F8_E5M2 I64 I32 U8 BOOL (the other safetensors dtypes are refused
// by name).
//
// Invariant of load_safetensors: a file either loads completely or throws mixtape::Error naming
// the file, the tensor (where there is one) and the file byte offset of the problem; a corrupt
// file never reads out of bounds, never allocates more than the file holds, and never creates
// an invalid value (a BOOL byte other than 0/1 is refused). Checked, like the reference reader:
// length prefix present, header length within the file, header is a JSON object of the shape
// above (no duplicate names), known dtypes, non-negative shapes whose byte size does not
// overflow, data_offsets with begin <= end and end - begin == numel * itemsize, and the tensors
// covering the data exactly once — no gaps, no overlaps, nothing left over at the end.
#pragma once
#include <map>
#include <string>

#include "core/state_dict.h"

namespace mixtape {

using SafetensorsMetadata = std::map<std::string, std::string>;

// Writes every tensor of `state` (CPU tensors, any strides: each is written contiguous) to
// `path`, plus `metadata` as "__metadata__" when it is not empty. Tensors are laid out widest
// dtype first, then by name (the reference writer's order, which keeps every tensor aligned
// to its itemsize); the header is space-padded to a multiple of 8 bytes. The file is written to
// `path + ".tmp"` and renamed, so a failed save never leaves a half-written `path`.
void save_safetensors(const StateDict& state, const std::string& path, const SafetensorsMetadata& metadata = {});

// The same bytes written to `path` itself (truncated first; removed if the write fails), with
// no temporary and no rename: for a caller with its own atomic replace (nn::save_checkpoint
// writes `path.tmp` with this, fsyncs it and renames it, so only one temporary name exists).
void write_safetensors_file(const StateDict& state, const std::string& path, const SafetensorsMetadata& metadata = {});

// Reads and validates `path` (see the invariant above). Tensors are fresh, contiguous, CPU
// tensors that own their memory. When `metadata` is given it receives "__metadata__"
// (empty if the file has none).
StateDict load_safetensors(const std::string& path, SafetensorsMetadata* metadata = nullptr);

// The same, from bytes already in memory; `what` names the source in errors.
StateDict parse_safetensors(const void* data, size_t size, const std::string& what,
                            SafetensorsMetadata* metadata = nullptr);

// The safetensors name of a dtype ("F32", "BOOL", ...).
const char* safetensors_dtype_name(DType t);

}  // namespace mixtape
