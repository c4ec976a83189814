// Declarations shared by the ONNX frontend's files.
#pragma once
#include "frontend/onnx/Importer.h"

#include <onnx/onnx_pb.h>

#include <map>
#include <set>

namespace sgc::onnx_import {

/// Decodes a TensorProto (inline or external data inside `baseDir`).
/// `what` names the tensor in errors.
Expected<ir::Tensor> decodeTensor(const onnx::TensorProto& t, const std::string& baseDir, const std::string& what);

/// What torch.onnx's dynamo exporter recorded of the exported program (TorchExport.cpp).
struct TorchExport {
  bool present = false;                                      ///< the model carries a torch.export graph signature
  bool optimized = false;                                    ///< onnxscript's optimizer folded constants in it
  std::set<std::string> parameters, mutated, held;           ///< the module's parameters, the buffers it updates, the initializers
  std::map<std::string, std::vector<std::string>> folded;    ///< initializer -> the parameters folded into it
  std::map<std::string, int> uses;                           ///< parameter -> the initializers that stand for it
  /// Whether initializer `name` is trained; `why` says why not, where training it is refused.
  bool trainable(const std::string& name, const ir::Tensor& data, std::string& why) const;
};
TorchExport readTorchExport(const onnx::GraphProto& g);

/// Per-model state while importing nodes.
struct ImportCtx {
  ir::Graph& graph;
  std::string file;    ///< for errors
  std::string baseDir; ///< external data root ("" refuses external data)
  int opset = 0;       ///< default-domain opset
  std::map<std::string, ir::Value*> values;
  std::map<std::string, std::vector<ir::Value*>> sequences; ///< sequence values, resolved to their tensors
  std::string label; ///< "file: node 'name' (Op)" of the node being imported
  TorchExport torch; ///< the torch.onnx exporter's record, when present
  std::map<std::string, const onnx::FunctionProto*> functions; ///< the model's functions, by "domain::name"
  int functionDepth = 0;                                        ///< calls being inlined

  Error fail(const std::string& msg) const { return makeError(label + ": " + msg); }
};

/// Converts one ONNX node into IR nodes / constants.
Error importNode(ImportCtx& ctx, const onnx::NodeProto& n, size_t index);

/// The torch exporter's record applied once the nodes are in: a graph that lost the module's
/// BatchNormalization is marked untrainable, and inference-form BatchNormalization of a
/// module in training mode made training-mode again.
void finishTorchExport(ImportCtx& ctx);

/// Model-local functions, inlined where they are called (Functions.cpp).
void registerFunctions(ImportCtx& ctx, const onnx::ModelProto& m);
bool isFunctionCall(const ImportCtx& ctx, const onnx::NodeProto& n);
Error importFunctionCall(ImportCtx& ctx, const onnx::NodeProto& n, const std::string& name);

/// ONNX sequence ops, resolved to tensor ops at import (Sequences.cpp).
bool isSequenceOp(const onnx::NodeProto& n);
Error importSequenceOp(ImportCtx& ctx, const onnx::NodeProto& n, const std::string& name);

/// Imports a GraphProto's initializers, inputs, nodes and outputs into ctx's
/// graph (the model's graph, or after it a training algorithm).
Error importGraphBody(ImportCtx& ctx, const onnx::GraphProto& g);

/// TrainingInfoProto: initialization (evaluated now) and algorithm (appended).
Error importTrainingInfo(ImportCtx& ctx, const onnx::ModelProto& m);
bool isGradientNode(const onnx::NodeProto& n);
Error importGradientNode(ImportCtx& ctx, const onnx::NodeProto& n);

} // namespace sgc::onnx_import
