// The ONNX frontend: ModelProto (through libonnx's protobuf classes) to an
// sgc IR graph. Initializers become parameters (floating point) or
// constants; dim_param becomes a symbolic dim; external data is read only
// from files inside the model's folder. Opsets 11 to 23 of the default
// domain are accepted; attributes that older opsets had where newer ones
// take inputs are turned into constant inputs. After import, infer-shapes
// has run and the graph is verified.
#pragma once
#include "ir/Error.h"
#include "ir/Graph.h"

#include <memory>
#include <string>

namespace sgc::onnx_import {

constexpr int kMinOpset = 7; ///< the first with multidirectional broadcasting (ops newer than it say theirs in Ops.def)
constexpr int kMaxOpset = 28;

/// Imports the model file at `path`. Errors start with the path.
Expected<std::unique_ptr<ir::Graph>> importModel(const std::string& path);

/// Imports a serialized ModelProto. `name` is used in errors; external data
/// is resolved inside `baseDir` and refused when `baseDir` is empty.
Expected<std::unique_ptr<ir::Graph>> importModelBytes(const void* data, size_t size, const std::string& name,
                                                      const std::string& baseDir);

/// Reads a serialized TensorProto file (as in ONNX's test data sets).
Expected<ir::Tensor> readTensorFile(const std::string& path, std::string* name = nullptr);

} // namespace sgc::onnx_import
