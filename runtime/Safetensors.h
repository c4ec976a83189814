// Reading and writing safetensors files (a JSON header with dtype, shape and
// byte offsets, then the raw little-endian data). Used for checkpoints, model
// inputs and outputs. Reading checks every offset against the file size;
// writing goes to a temporary file renamed into place, so a failed write never
// leaves a half-written file.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace sgc::rt {

struct StTensor {
  std::string dtype; ///< safetensors name: "F32", "I64", ...
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
};

/// Tensors by name (sorted: deterministic files).
using StFile = std::map<std::string, StTensor>;

/// Byte size of one element of a safetensors dtype, or 0 when unknown.
size_t stDTypeSize(const std::string& dtype);

/// Reads `path`. On failure returns false and sets `error` (naming the file).
bool readSafetensors(const std::string& path, StFile& out, std::string& error);
/// Parses safetensors bytes; `what` names the source in errors.
bool parseSafetensors(const uint8_t* data, size_t size, const std::string& what, StFile& out, std::string& error);
/// Writes `path` atomically (temporary file + rename).
bool writeSafetensors(const std::string& path, const StFile& tensors, std::string& error);

} // namespace sgc::rt
