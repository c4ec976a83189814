// A small builder for the importer's decompositions of ONNX ops into IR ops
// (Attention, RMSNormalization, RotaryEmbedding, ...): nodes named after the
// ONNX node, constants, and the static shapes of values read so far.
#pragma once
#include "frontend/onnx/Internal.h"

namespace sgc::onnx_import {

struct Build {
  ImportCtx& c;
  std::string name; ///< the ONNX node's name: every IR node made is named after it

  ir::Value* op(ir::Op op, std::vector<ir::Value*> ins, std::map<std::string, ir::Attr> attrs = {}, const std::string& out = "");
  /// The results of a node of several outputs.
  std::vector<ir::Value*> ops(ir::Op op, std::vector<ir::Value*> ins, int outputs, std::map<std::string, ir::Attr> attrs = {});
  ir::Value* ints(const std::vector<int64_t>& v);
  ir::Value* int64(int64_t v);
  /// A scalar of `like`'s dtype (a CastLike of a float64 constant, folded once types are known).
  ir::Value* scalarLike(double v, ir::Value* like);
  /// The static shape of `v` from the graph read so far (errors name the node when unknown).
  Expected<std::vector<int64_t>> shape(ir::Value* v);
  /// The dims of `v`, each its size when static, -1 when not (a symbolic batch or sequence): the
  /// rank must be known.
  Expected<std::vector<int64_t>> dims(ir::Value* v);
  /// Dim `d` of `v` as an i64 [1] computed from its shape at run time (constant once it is static).
  ir::Value* dimOf(ir::Value* v, int64_t d);
  /// Binds ONNX output `i` of `n` (when present) to `v`, renamed after it through an Identity.
  void output(const onnx::NodeProto& n, int i, ir::Value* v);
};

/// Decompositions of ONNX ops into IR ops at import (Decompose.cpp, Attention.cpp).
bool isDecomposed(const onnx::NodeProto& n);
Error importDecomposed(ImportCtx& c, const onnx::NodeProto& n, const std::string& name);
Error importAttention(ImportCtx& c, const onnx::NodeProto& n, const std::string& name);
Error importEinsum(ImportCtx& c, const onnx::NodeProto& n, const std::string& name);

/// The value of an ONNX node's input, nullptr when absent or empty.
Expected<ir::Value*> inputOf(ImportCtx& c, const onnx::NodeProto& n, int i);
/// Inputs 0..count-1 of `n` (nullptr where absent).
Expected<std::vector<ir::Value*>> inputsOf(ImportCtx& c, const onnx::NodeProto& n, int count);
int64_t intAttr(const onnx::NodeProto& n, const std::string& name, int64_t def);
std::vector<int64_t> intsAttr(const onnx::NodeProto& n, const std::string& name, std::vector<int64_t> def);
std::string stringAttr(const onnx::NodeProto& n, const std::string& name, const std::string& def);
double floatAttr(const onnx::NodeProto& n, const std::string& name, double def);
bool hasAttr(const onnx::NodeProto& n, const std::string& name);

} // namespace sgc::onnx_import
