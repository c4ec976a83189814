// Declarations shared by the ONNX frontend's files.
#pragma once
#include "frontend/onnx/Importer.h"

#include <onnx/onnx_pb.h>

#include <map>

namespace sgc::onnx_import {

/// Decodes a TensorProto (inline or external data inside `baseDir`).
/// `what` names the tensor in errors.
Expected<ir::Tensor> decodeTensor(const onnx::TensorProto& t, const std::string& baseDir, const std::string& what);

/// Per-model state while importing nodes.
struct ImportCtx {
  ir::Graph& graph;
  std::string file;    ///< for errors
  std::string baseDir; ///< external data root ("" refuses external data)
  int opset = 0;       ///< default-domain opset
  std::map<std::string, ir::Value*> values;
  std::string label; ///< "file: node 'name' (Op)" of the node being imported

  Error fail(const std::string& msg) const { return makeError(label + ": " + msg); }
};

/// Converts one ONNX node into IR nodes / constants.
Error importNode(ImportCtx& ctx, const onnx::NodeProto& n, size_t index);

/// Imports a GraphProto's initializers, inputs, nodes and outputs into ctx's
/// graph (the model's graph, or after it a training algorithm).
Error importGraphBody(ImportCtx& ctx, const onnx::GraphProto& g);

/// TrainingInfoProto: initialization (evaluated now) and algorithm (appended).
Error importTrainingInfo(ImportCtx& ctx, const onnx::ModelProto& m);
bool isGradientNode(const onnx::NodeProto& n);
Error importGradientNode(ImportCtx& ctx, const onnx::NodeProto& n);

} // namespace sgc::onnx_import
