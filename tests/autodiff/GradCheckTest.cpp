// Every gradient rule against central finite differences in float64. Each
// case builds one op over float64 parameters, takes loss = sum(y * w) with a
// fixed random w (so every output element counts with its own weight), and
// compares autodiff's gradients with (loss(p + h) - loss(p - h)) / 2h.
#include "ir/autodiff/Autodiff.h"
#include "ir/interp/Interpreter.h"
#include "ir/passes/InferShapes.h"

#include <cmath>
#include <gtest/gtest.h>
#include <random>

using namespace sgc;
using namespace sgc::ir;

namespace {

struct In {
  std::vector<int64_t> shape;
  double lo = -1, hi = 1;
  std::optional<Tensor> value; ///< a constant instead of a parameter
  bool param = false;          ///< with `value`: a parameter holding it (chosen points: zeros, ties)
};

struct Case {
  std::string name;
  Op op;
  std::vector<In> ins;
  std::map<std::string, Attr> attrs = {};
  int outputs = 1;
  int weighed = 0; ///< how many outputs the loss weighs (0: all)
};

In ints(std::vector<int64_t> v) { return In{{}, 0, 0, Tensor::fromI64(DType::I64, {(int64_t)v.size()}, v)}; }
In scalarInt(int64_t v) { return In{{}, 0, 0, Tensor::scalarI64(v)}; }
In indices(std::vector<int64_t> shape, std::vector<int64_t> v) { return In{{}, 0, 0, Tensor::fromI64(DType::I64, shape, v)}; }
In f64(std::vector<int64_t> shape, std::vector<double> v) { return In{{}, 0, 0, Tensor::fromF64(DType::F64, shape, v)}; }
In boolean(std::vector<int64_t> shape, std::vector<int64_t> v) { return In{{}, 0, 0, Tensor::fromI64(DType::Bool, shape, v)}; }
In p(std::vector<int64_t> shape, double lo = -1, double hi = 1) { return In{shape, lo, hi, std::nullopt}; }
In pAt(std::vector<int64_t> shape, std::vector<double> v) { return In{{}, 0, 0, Tensor::fromF64(DType::F64, shape, v), true}; }

std::vector<Case> cases() {
  std::vector<Case> cs;
  for (Op op : {Op::Neg, Op::Abs, Op::Exp, Op::Erf, Op::Tanh, Op::Sigmoid, Op::Relu, Op::LeakyRelu, Op::Elu, Op::Selu,
                Op::Celu, Op::Gelu, Op::Softplus, Op::Softsign, Op::HardSigmoid, Op::HardSwish, Op::ThresholdedRelu,
                Op::Mish, Op::Sin, Op::Cos, Op::Tan, Op::Atan, Op::Sinh, Op::Cosh, Op::Asinh, Op::Identity})
    cs.push_back({std::string(opName(op)), op, {p({2, 3}, -2, 2)}, op == Op::ThresholdedRelu ? std::map<std::string, Attr>{{"alpha", 0.3}} : std::map<std::string, Attr>{}});
  cs.push_back({"GeluTanh", Op::Gelu, {p({2, 3}, -2, 2)}, {{"approximate", std::string("tanh")}}});
  for (Op op : {Op::Log, Op::Sqrt, Op::Reciprocal}) cs.push_back({std::string(opName(op)), op, {p({3}, 0.5, 2)}});
  for (Op op : {Op::Asin, Op::Acos, Op::Atanh}) cs.push_back({std::string(opName(op)), op, {p({3}, -0.8, 0.8)}});
  cs.push_back({"Acosh", Op::Acosh, {p({3}, 1.5, 3)}});
  cs.push_back({"Clip", Op::Clip, {p({6}, -2, 2), f64({}, {-0.5}), f64({}, {0.7})}});
  cs.push_back({"Add", Op::Add, {p({2, 3}), p({3})}});
  cs.push_back({"Sub", Op::Sub, {p({2, 1}), p({1, 3})}});
  cs.push_back({"Mul", Op::Mul, {p({2, 3}), p({2, 1})}});
  cs.push_back({"Div", Op::Div, {p({2, 3}), p({3}, 0.5, 2)}});
  cs.push_back({"Pow", Op::Pow, {p({2, 3}, 0.5, 2), p({3})}});
  cs.push_back({"PowConst", Op::Pow, {p({2, 3}), f64({}, {2})}});
  cs.push_back({"Sum", Op::Sum, {p({2, 3}), p({3}), p({2, 1})}});
  cs.push_back({"Mean", Op::Mean, {p({2, 3}), p({3})}});
  cs.push_back({"Max", Op::Max, {p({2, 3}), p({3})}});
  cs.push_back({"Min", Op::Min, {p({2, 3}), p({2, 3})}});
  cs.push_back({"Where", Op::Where, {boolean({2, 3}, {1, 0, 1, 1, 0, 0}), p({2, 3}), p({3})}});
  cs.push_back({"MatMul", Op::MatMul, {p({2, 3}), p({3, 4})}});
  cs.push_back({"MatMulVecLeft", Op::MatMul, {p({3}), p({3, 4})}});
  cs.push_back({"MatMulVecRight", Op::MatMul, {p({2, 3}), p({3})}});
  cs.push_back({"MatMulBatched", Op::MatMul, {p({2, 2, 3}), p({3, 4})}});
  cs.push_back({"MatMulBroadcastBatch", Op::MatMul, {p({1, 2, 3}), p({2, 3, 4})}});
  cs.push_back({"Gemm", Op::Gemm, {p({2, 3}), p({3, 4}), p({4})}, {{"alpha", 0.5}, {"beta", 2.0}}});
  cs.push_back({"GemmTrans", Op::Gemm, {p({3, 2}), p({4, 3}), p({2, 1})}, {{"transA", int64_t(1)}, {"transB", int64_t(1)}}});
  for (Op op : {Op::ReduceSum, Op::ReduceMean, Op::ReduceMax, Op::ReduceMin, Op::ReduceL2, Op::ReduceSumSquare,
                Op::ReduceLogSumExp, Op::ReduceL1}) {
    cs.push_back({std::string(opName(op)) + "Axis1", op, {p({2, 3, 2}), ints({1})}});
    cs.push_back({std::string(opName(op)) + "NoKeep", op, {p({2, 3}), ints({-1})}, {{"keepdims", int64_t(0)}}});
  }
  cs.push_back({"ReduceProd", Op::ReduceProd, {p({2, 3}, 0.5, 2), ints({0})}});
  cs.push_back({"ReduceLogSum", Op::ReduceLogSum, {p({2, 3}, 0.5, 2)}});
  cs.push_back({"ReduceSumAll", Op::ReduceSum, {p({2, 3})}, {{"keepdims", int64_t(0)}}});
  cs.push_back({"Softmax", Op::Softmax, {p({2, 4})}});
  cs.push_back({"SoftmaxAxis0", Op::Softmax, {p({3, 2})}, {{"axis", int64_t(0)}}});
  cs.push_back({"LogSoftmax", Op::LogSoftmax, {p({2, 4})}});
  cs.push_back({"LayerNorm", Op::LayerNormalization, {p({2, 5}), p({5}), p({5})}});
  cs.push_back({"LayerNormAxis1", Op::LayerNormalization, {p({2, 2, 3}), p({2, 3})}, {{"axis", int64_t(1)}}});
  cs.push_back({"RmsNorm", Op::RmsNorm, {p({2, 5}), p({5})}, {{"epsilon", 1e-3}}});
  cs.push_back({"RmsNormAxis1", Op::RmsNorm, {p({2, 2, 3}), p({2, 3})}, {{"axis", int64_t(1)}}});
  cs.push_back({"BatchNormTraining", Op::BatchNormalization, {p({3, 2, 2}), p({2}), p({2}), f64({2}, {0, 0}), f64({2}, {1, 1})},
                {{"training_mode", int64_t(1)}}});
  cs.push_back({"DropoutTraining", Op::Dropout, {p({4, 5}), f64({}, {0.3}), boolean({}, {1})}, {{"seed", int64_t(3)}}});
  cs.push_back({"SceLossMean", Op::SoftmaxCrossEntropyLoss, {p({3, 4}), indices({3}, {1, 0, 3})}});
  cs.push_back({"SceLossWeightsIgnore", Op::SoftmaxCrossEntropyLoss, {p({4, 3, 2}), indices({4, 2}, {0, 1, 2, 2, 1, 0, 1, 1}), f64({3}, {0.5, 1.25, 0.75})},
                {{"ignore_index", int64_t(2)}}});
  cs.push_back({"SceLossNone", Op::SoftmaxCrossEntropyLoss, {p({3, 4}), indices({3}, {1, 0, 3})}, {{"reduction", std::string("none")}}});
  cs.push_back({"SceLossLogProb", Op::SoftmaxCrossEntropyLoss, {p({3, 4}), indices({3}, {1, 0, 3})}, {{"reduction", std::string("sum")}}, 2});
  cs.push_back({"NllLoss", Op::NegativeLogLikelihoodLoss, {p({3, 4}), indices({3}, {1, 0, 3}), f64({4}, {0.5, 1.5, 1, 2})}});
  cs.push_back({"Reshape", Op::Reshape, {p({2, 3}), ints({3, 2})}});
  cs.push_back({"Flatten", Op::Flatten, {p({2, 3, 2})}});
  cs.push_back({"Squeeze", Op::Squeeze, {p({2, 1, 3}), ints({1})}});
  cs.push_back({"Unsqueeze", Op::Unsqueeze, {p({2, 3}), ints({0})}});
  cs.push_back({"Transpose", Op::Transpose, {p({2, 3, 4})}, {{"perm", std::vector<int64_t>{1, 2, 0}}}});
  cs.push_back({"Concat", Op::Concat, {p({2, 3}), p({2, 1})}, {{"axis", int64_t(1)}}});
  cs.push_back({"Split", Op::Split, {p({2, 5}), ints({2, 3})}, {{"axis", int64_t(1)}}, 2});
  cs.push_back({"Slice", Op::Slice, {p({4, 5}), ints({1, 4}), ints({3, 0}), ints({0, 1}), ints({1, -2})}});
  cs.push_back({"Gather", Op::Gather, {p({4, 3}), indices({2, 2}, {0, 3, -1, 0})}});
  cs.push_back({"GatherAxis1", Op::Gather, {p({2, 4}), indices({3}, {1, 1, 2})}, {{"axis", int64_t(1)}}});
  cs.push_back({"GatherElements", Op::GatherElements, {p({3, 3}), indices({2, 3}, {0, 2, 1, 1, 0, 0})}});
  cs.push_back({"Expand", Op::Expand, {p({3, 1}), ints({2, 3, 4})}});
  cs.push_back({"Trilu", Op::Trilu, {p({3, 4}), scalarInt(1)}, {{"upper", int64_t(0)}}});
  cs.push_back({"Conv", Op::Conv, {p({2, 2, 5, 5}), p({3, 2, 3, 3}), p({3})}, {{"pads", std::vector<int64_t>{1, 0, 1, 2}}, {"strides", std::vector<int64_t>{2, 1}}}});
  cs.push_back({"ConvGroupDilated", Op::Conv, {p({1, 4, 6, 6}), p({2, 2, 2, 2})}, {{"group", int64_t(2)}, {"dilations", std::vector<int64_t>{2, 1}}}});
  cs.push_back({"MaxPool", Op::MaxPool, {p({1, 2, 5, 5})}, {{"kernel_shape", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{2, 2}}, {"pads", std::vector<int64_t>{1, 1, 0, 0}}}});
  cs.push_back({"AveragePool", Op::AveragePool, {p({1, 2, 5, 5})}, {{"kernel_shape", std::vector<int64_t>{3, 3}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"count_include_pad", int64_t(1)}}});
  cs.push_back({"AveragePoolNoPadCount", Op::AveragePool, {p({1, 1, 4, 4})}, {{"kernel_shape", std::vector<int64_t>{3, 3}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}}});
  cs.push_back({"GlobalAveragePool", Op::GlobalAveragePool, {p({2, 3, 2, 2})}});
  cs.push_back({"GlobalMaxPool", Op::GlobalMaxPool, {p({2, 3, 2, 2})}});
  // Cases that break rules (issue 18): slices with steps, negative starts and axes; splits and
  // concatenations; broadcasting both ways; repeated indices; ties; padding; pooling with padding,
  // ceil_mode and dilations; grouped and depthwise convolutions, and windows larger than their input.
  cs.push_back({"SliceNegativeAxesSteps", Op::Slice, {p({3, 6, 4}), ints({-1, -5}), ints({-4, 100}), ints({-1, 1}), ints({-1, 2})}});
  cs.push_back({"SliceStepThree", Op::Slice, {p({7, 2}), ints({1}), ints({7}), ints({0}), ints({3})}});
  cs.push_back({"SliceEndsPastDim", Op::Slice, {p({4, 3}), ints({2, -100}), ints({100, 100}), ints({0, 1})}});
  cs.push_back({"SplitThreeWays", Op::Split, {p({2, 7, 2}), ints({3, 1, 3})}, {{"axis", int64_t(-2)}}, 3});
  cs.push_back({"SplitEqual", Op::Split, {p({6, 2})}, {{"num_outputs", int64_t(3)}}, 3});
  cs.push_back({"ConcatThree", Op::Concat, {p({1, 2, 2}), p({3, 2, 2}), p({2, 2, 2})}, {{"axis", int64_t(0)}}});
  cs.push_back({"AddBroadcastBoth", Op::Add, {p({2, 1, 3}), p({4, 1})}});
  cs.push_back({"MulBroadcastScalar", Op::Mul, {p({2, 3}), p({})}});
  cs.push_back({"DivBroadcastFirst", Op::Div, {p({3, 1}, 0.5, 2), p({2, 1, 4}, 0.5, 2)}});
  cs.push_back({"GatherRepeated", Op::Gather, {p({3, 2}), indices({5}, {1, 1, 0, 1, -2})}});
  cs.push_back({"GatherScalarIndex", Op::Gather, {p({3, 4}), indices({}, {2})}, {{"axis", int64_t(1)}}});
  cs.push_back({"GatherElementsRepeated", Op::GatherElements, {p({2, 3}), indices({2, 4}, {2, 2, 0, 2, 1, 1, 1, 0})}, {{"axis", int64_t(1)}}});
  cs.push_back({"MaxTies", Op::Max, {f64({2, 2}, {1, 2, 3, 4}), p({2, 2}, 0, 0), f64({2, 2}, {1, 0, 3, -1})}});
  cs.push_back({"ReduceMaxTies", Op::ReduceMax, {f64({2, 3}, {1, 3, 3, 2, 2, 0}), ints({1})}});
  cs.push_back({"MaxPoolTies", Op::MaxPool, {f64({1, 1, 3, 3}, {1, 1, 0, 1, 1, 0, 0, 0, 2})}, {{"kernel_shape", std::vector<int64_t>{2, 2}}}});
  cs.push_back({"MaxPoolCeilDilated", Op::MaxPool, {p({1, 2, 6, 5})},
                {{"kernel_shape", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{2, 2}}, {"dilations", std::vector<int64_t>{2, 1}},
                 {"ceil_mode", int64_t(1)}}});
  cs.push_back({"MaxPoolPadStride2", Op::MaxPool, {p({2, 1, 4, 4})},
                {{"kernel_shape", std::vector<int64_t>{3, 3}}, {"strides", std::vector<int64_t>{2, 2}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}}});
  cs.push_back({"AveragePoolCeil", Op::AveragePool, {p({1, 1, 5, 5})},
                {{"kernel_shape", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{2, 2}}, {"ceil_mode", int64_t(1)}}});
  cs.push_back({"PadConstant", Op::Pad, {p({2, 3}), ints({1, 0, 0, 2}), f64({}, {0.5})}});
  cs.push_back({"PadNegative", Op::Pad, {p({3, 4}), ints({-1, 1, 0, -2})}});
  cs.push_back({"ConvDepthwise", Op::Conv, {p({2, 3, 4, 4}), p({3, 1, 3, 3}), p({3})}, {{"group", int64_t(3)}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}}});
  cs.push_back({"ConvDepthwiseStride2Small", Op::Conv, {p({2, 2, 2, 2}), p({2, 1, 3, 3})},
                {{"group", int64_t(2)}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"strides", std::vector<int64_t>{2, 2}}}});
  cs.push_back({"ConvKernelOverOneByOne", Op::Conv, {p({2, 2, 1, 1}), p({2, 1, 3, 3})}, {{"group", int64_t(2)}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}}});
  cs.push_back({"ConvGrouped", Op::Conv, {p({1, 6, 3, 3}), p({4, 3, 2, 2}), p({4})}, {{"group", int64_t(2)}, {"strides", std::vector<int64_t>{1, 2}}}});
  cs.push_back({"ConvStride2Odd", Op::Conv, {p({1, 1, 5, 4}), p({2, 1, 3, 2})}, {{"strides", std::vector<int64_t>{2, 2}}, {"pads", std::vector<int64_t>{1, 0, 0, 1}}}});
  cs.push_back({"BatchNormSmallBatch", Op::BatchNormalization, {p({2, 3, 1, 1}), p({3}), p({3}), f64({3}, {0, 0, 0}), f64({3}, {1, 1, 1})},
                {{"training_mode", int64_t(1)}}});
  cs.push_back({"BatchNormSpatial", Op::BatchNormalization, {p({2, 2, 3, 2}), p({2}), p({2}), f64({2}, {0, 0}), f64({2}, {1, 1})},
                {{"training_mode", int64_t(1)}, {"epsilon", 1e-3}}});
  cs.push_back({"GatherND", Op::GatherND, {p({3, 2, 2}), indices({3, 2}, {0, 1, 2, 0, 0, 1})}});
  cs.push_back({"GatherNDRepeatedBatch", Op::GatherND, {p({2, 3, 2}), indices({2, 2, 1}, {1, 1, 2, -1})}, {{"batch_dims", int64_t(1)}}});
  cs.push_back({"ScatterND", Op::ScatterND, {p({4, 3}), indices({2, 1}, {3, 1}), p({2, 3})}});
  cs.push_back({"ScatterNDAddRepeated", Op::ScatterND, {p({4, 3}), indices({3, 1}, {1, 1, -1}), p({3, 3})}, {{"reduction", std::string("add")}}});
  cs.push_back({"ScatterElements", Op::ScatterElements, {p({3, 3}), indices({2, 3}, {1, 0, 2, 0, 2, 1}), p({2, 3})}});
  cs.push_back({"ScatterElementsAddRepeated", Op::ScatterElements, {p({2, 4}), indices({2, 3}, {1, 1, 3, 0, 0, -1}), p({2, 3})},
                {{"axis", int64_t(1)}, {"reduction", std::string("add")}}});
  cs.push_back({"CumSum", Op::CumSum, {p({2, 4}), scalarInt(1)}});
  cs.push_back({"CumSumExclusiveReverse", Op::CumSum, {p({3, 2}), scalarInt(0)}, {{"exclusive", int64_t(1)}, {"reverse", int64_t(1)}}});
  cs.push_back({"CumProd", Op::CumProd, {p({2, 4}, 0.5, 1.5), scalarInt(-1)}});
  cs.push_back({"CumProdWithZero", Op::CumProd, {pAt({5}, {0.7, 0, -1.3, 0.4, 2}), scalarInt(0)}, {{"reverse", int64_t(1)}}});
  cs.push_back({"CumProdExclusive", Op::CumProd, {p({4, 2}, -1.5, 1.5), scalarInt(0)}, {{"exclusive", int64_t(1)}}});
  // ConvTranspose is ConvGradInput at import: its own gradients, strided with padding, grouped.
  cs.push_back({"ConvTransposeStrided", Op::ConvGradInput, {p({1, 2, 3, 3}), p({2, 3, 3, 2}), ints({1, 3, 6, 6})},
                {{"strides", std::vector<int64_t>{2, 2}}, {"pads", std::vector<int64_t>{1, 0, 0, 0}}}});
  cs.push_back({"ConvTransposeGrouped", Op::ConvGradInput, {p({2, 4, 3}), p({4, 1, 2}), ints({2, 2, 4})}, {{"group", int64_t(2)}}});
  cs.push_back({"ResizeLinearUp", Op::Resize, {p({1, 2, 3, 2}), f64({0}, {}), f64({4}, {1, 1, 2, 1.5})}, {{"mode", std::string("linear")}}});
  cs.push_back({"ResizeCubicAlignCorners", Op::Resize, {p({1, 1, 4, 4}), f64({0}, {}), f64({4}, {1, 1, 0.75, 1.25})},
                {{"mode", std::string("cubic")}, {"coordinate_transformation_mode", std::string("align_corners")}}});
  cs.push_back({"ResizeNearest", Op::Resize, {p({2, 3}), f64({0}, {}), f64({2}, {2, 0.7})}});
  cs.push_back({"ResizeLinearAntialiasDown", Op::Resize, {p({1, 1, 6, 5}), f64({0}, {}), f64({4}, {1, 1, 0.5, 0.6})},
                {{"mode", std::string("linear")}, {"antialias", int64_t(1)}}});
  cs.push_back({"ResizeCropAndResize", Op::Resize, {p({1, 1, 4, 4}), f64({8}, {0, 0, 0.2, 0.1, 1, 1, 0.9, 1.3}), f64({4}, {1, 1, 0.8, 1.5})},
                {{"mode", std::string("linear")}, {"coordinate_transformation_mode", std::string("tf_crop_and_resize")}, {"extrapolation_value", 2.0}}});
  // Fused attention: its result only (no gradient flows through the log-sum-exp).
  cs.push_back({"FusedAttention", Op::FusedAttention, {p({2, 3, 4}), p({2, 5, 4}), p({2, 5, 3})}, {{"scale", 0.6}}, 2, 1});
  cs.push_back({"FusedAttentionCausal", Op::FusedAttention, {p({1, 2, 4, 3}), p({1, 2, 4, 3}), p({1, 2, 4, 2})},
                {{"scale", 0.8}, {"causal", int64_t(1)}}, 2, 1});
  cs.push_back({"FusedAttentionCausalMoreKeys", Op::FusedAttention, {p({2, 3, 2}), p({2, 5, 2}), p({2, 5, 3})},
                {{"scale", 1.0}, {"causal", int64_t(1)}}, 2, 1});
  // Grouped-query attention: 4 query heads over 2 key/value heads (dk and dv summed over each group).
  cs.push_back({"FusedAttentionGrouped", Op::FusedAttention, {p({1, 4, 3, 2}), p({1, 2, 3, 2}), p({1, 2, 3, 3})},
                {{"scale", 0.7}, {"causal", int64_t(1)}}, 2, 1});
  // The result written [B, T, H, D] (result_layout), grouped and not.
  cs.push_back({"FusedAttentionResultBthd", Op::FusedAttention, {p({2, 3, 4, 2}), p({2, 3, 4, 2}), p({2, 3, 4, 3})},
                {{"scale", 0.6}, {"causal", int64_t(1)}, {"result_layout", std::string("bthd")}}, 2, 1});
  cs.push_back({"FusedAttentionGroupedResultBthd", Op::FusedAttention, {p({1, 4, 3, 2}), p({1, 2, 3, 2}), p({1, 2, 3, 3})},
                {{"scale", 0.7}, {"causal", int64_t(1)}, {"result_layout", std::string("bthd")}}, 2, 1});
  return cs;
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class GradCheck : public ::testing::TestWithParam<Case> {};

double lossOf(const Graph& g, Value* loss) {
  auto r = run(g, {});
  EXPECT_TRUE(!!r) << errorText(r.takeError());
  return r ? r->at(loss->name).getF(0) : NAN;
}

TEST_P(GradCheck, MatchesFiniteDifferences) {
  const Case& cs = GetParam();
  std::mt19937 rng(7);
  Graph g;
  std::vector<Value*> ins, params;
  for (size_t i = 0; i < cs.ins.size(); ++i) {
    const In& in = cs.ins[i];
    std::string name = "in" + std::to_string(i);
    if (in.value && in.param) {
      ins.push_back(g.addParam(name, *in.value));
      params.push_back(ins.back());
      continue;
    }
    if (in.value) {
      ins.push_back(g.addConst(name, *in.value));
      continue;
    }
    Tensor t(DType::F64, in.shape);
    std::uniform_real_distribution<double> u(in.lo, in.hi);
    for (int64_t k = 0; k < t.numel(); ++k) t.setF(k, u(rng));
    ins.push_back(g.addParam(name, t));
    params.push_back(ins.back());
  }
  Node* node = g.addNode(cs.op, ins, cs.outputs, "op");
  node->attrs = cs.attrs;
  ASSERT_FALSE(inferShapes(g, false));
  // loss = sum over outputs of sum(y * w)
  Value* loss = nullptr;
  for (size_t o = 0; o < (cs.weighed ? (size_t)cs.weighed : node->outputs.size()); ++o) {
    Value* y = node->outputs[o];
    ASSERT_TRUE(y->type.isStatic()) << toString(y->type);
    Tensor w(DType::F64, y->type.shape());
    std::uniform_real_distribution<double> u(0.5, 1.5);
    for (int64_t k = 0; k < w.numel(); ++k) w.setF(k, u(rng));
    Value* prod = g.addNode(Op::Mul, {y, g.addConst(g.uniqueName("w"), w)}, 1, "weigh")->outputs[0];
    Value* s = g.addNode(Op::ReduceSum, {prod}, 1, "sum")->outputs[0];
    g.nodes().back()->attrs["keepdims"] = int64_t(0);
    loss = loss ? g.addNode(Op::Add, {loss, s}, 1, "total")->outputs[0] : s;
  }
  ASSERT_FALSE(inferShapes(g, false));
  g.outputs = {loss};
  auto grads = autodiff(g, loss, params);
  ASSERT_TRUE(!!grads) << errorText(grads.takeError());
  for (Value* prm : params) {
    ASSERT_TRUE((*grads)[prm]) << "no gradient for " << prm->name;
    g.outputs.push_back((*grads)[prm]);
  }
  auto analytic = run(g, {});
  ASSERT_TRUE(!!analytic) << errorText(analytic.takeError());
  const double h = 1e-6;
  for (Value* prm : params) {
    Tensor base = *prm->data;
    const Tensor& grad = analytic->at((*grads)[prm]->name);
    ASSERT_EQ(grad.shape, base.shape) << prm->name;
    for (int64_t k = 0; k < base.numel(); ++k) {
      Tensor plus = base, minus = base;
      plus.setF(k, base.getF(k) + h);
      minus.setF(k, base.getF(k) - h);
      prm->data = std::make_shared<const Tensor>(plus);
      double lp = lossOf(g, loss);
      prm->data = std::make_shared<const Tensor>(minus);
      double lm = lossOf(g, loss);
      prm->data = std::make_shared<const Tensor>(base);
      double numeric = (lp - lm) / (2 * h), got = grad.getF(k);
      EXPECT_NEAR(got, numeric, 1e-6 + 1e-5 * std::fabs(numeric)) << prm->name << "[" << k << "]";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, GradCheck, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

TEST(Autodiff, IntegerPathsAndPruning) {
  // loss depends on w only through ArgMax (no gradient) and on v directly; u is unused.
  Graph g;
  Value* w = g.addParam("w", Tensor::fromF64(DType::F32, {3}, {1, 5, 2}));
  Value* v = g.addParam("v", Tensor::fromF64(DType::F32, {}, {2}));
  Value* u = g.addParam("u", Tensor::fromF64(DType::F32, {}, {4}));
  Value* am = g.addNode(Op::ArgMax, {w}, 1, "am")->outputs[0];
  Value* amf = g.addNode(Op::Cast, {am}, 1, "cast")->outputs[0];
  g.nodes().back()->attrs["to"] = std::string("f32");
  Value* s = g.addNode(Op::ReduceSum, {amf}, 1, "s")->outputs[0];
  g.nodes().back()->attrs["keepdims"] = int64_t(0);
  Value* loss = g.addNode(Op::Mul, {s, v}, 1, "loss")->outputs[0];
  g.outputs = {loss};
  ASSERT_FALSE(inferShapes(g));
  auto grads = autodiff(g, loss, {w, v, u});
  ASSERT_TRUE(!!grads) << errorText(grads.takeError());
  EXPECT_EQ((*grads)[w], nullptr);
  EXPECT_EQ((*grads)[u], nullptr);
  ASSERT_NE((*grads)[v], nullptr);
  g.outputs.push_back((*grads)[v]);
  auto r = run(g, {});
  ASSERT_TRUE(!!r);
  EXPECT_EQ(r->at((*grads)[v]->name).getF(0), 1.0); // d(argmax * v)/dv = argmax = 1
}

TEST(Autodiff, TiedParameterAccumulates) {
  Graph g;
  Value* w = g.addParam("w", Tensor::fromF64(DType::F64, {2, 2}, {1, 2, 3, 4}));
  Value* y = g.addNode(Op::MatMul, {w, w}, 1, "ww")->outputs[0]; // w used twice
  Value* loss = g.addNode(Op::ReduceSum, {y}, 1, "s")->outputs[0];
  g.nodes().back()->attrs["keepdims"] = int64_t(0);
  ASSERT_FALSE(inferShapes(g));
  auto grads = autodiff(g, loss, {w});
  ASSERT_TRUE(!!grads);
  g.outputs = {(*grads)[w]};
  auto r = run(g, {});
  ASSERT_TRUE(!!r);
  // d sum(W W) / dW = 1 W^T + W^T 1: [[1+2+1+3, 3+4+1+3], [1+2+2+4, 3+4+2+4]]
  EXPECT_EQ(r->at((*grads)[w]->name).toF64(), (std::vector<double>{7, 11, 9, 13}));
}

TEST(Autodiff, NonScalarTargetIsSummed) {
  Graph g;
  Value* w = g.addParam("w", Tensor::fromF64(DType::F32, {3}, {1, 2, 3}));
  Value* y = g.addNode(Op::Mul, {w, w}, 1, "sq")->outputs[0];
  ASSERT_FALSE(inferShapes(g));
  auto grads = autodiff(g, y, {w});
  ASSERT_TRUE(!!grads) << errorText(grads.takeError());
  g.outputs = {(*grads)[w]};
  auto r = run(g, {});
  ASSERT_TRUE(!!r);
  EXPECT_EQ(r->at((*grads)[w]->name).toF64(), (std::vector<double>{2, 4, 6})); // d sum(w^2) / dw
  Value* idx = g.addNode(Op::ArgMax, {w}, 1, "am")->outputs[0];
  ASSERT_FALSE(inferShapes(g));
  auto bad = autodiff(g, idx, {w});
  ASSERT_FALSE(!!bad);
  EXPECT_NE(errorText(bad.takeError()).find("must be floating point"), std::string::npos);
}

} // namespace
