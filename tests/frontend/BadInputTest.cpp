// Malformed and hostile models: each import gives one clear error naming the
// file, the node and what was wrong, and never crashes.
#include "frontend/onnx/Importer.h"

#include <onnx/onnx_pb.h>

#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <random>

using namespace sgc;
namespace fs = std::filesystem;

namespace {

class BadInput : public ::testing::Test {
protected:
  void SetUp() override {
    dir = fs::temp_directory_path() / ("sgc-bad-input-" + std::to_string(getpid()));
    fs::create_directories(dir / "model");
    model = fs::path(dir / "model" / "m.onnx").string();
  }
  void TearDown() override { fs::remove_all(dir); }

  /// x: f32[2] -> Relu -> y
  static onnx::ModelProto base() {
    onnx::ModelProto m;
    m.set_ir_version(8);
    m.add_opset_import()->set_version(17);
    auto* g = m.mutable_graph();
    g->set_name("g");
    auto* in = g->add_input();
    in->set_name("x");
    in->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
    in->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(2);
    auto* n = g->add_node();
    n->set_name("relu");
    n->set_op_type("Relu");
    n->add_input("x");
    n->add_output("y");
    g->add_output()->set_name("y");
    return m;
  }

  static onnx::TensorProto* addWeight(onnx::ModelProto& m, const std::vector<int64_t>& dims) {
    auto* t = m.mutable_graph()->add_initializer();
    t->set_name("w");
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    return t;
  }

  std::string importError(const onnx::ModelProto& m) {
    std::ofstream(model, std::ios::binary) << m.SerializeAsString();
    return importFileError();
  }

  std::string importFileError() {
    auto g = onnx_import::importModel(model);
    if (g) return "";
    std::string msg = errorText(g.takeError());
    EXPECT_EQ(msg.rfind(model, 0), 0u) << "the error names the file first: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
    return msg;
  }

  fs::path dir;
  std::string model;
};

#define EXPECT_CONTAINS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << "message: " << (msg)

TEST_F(BadInput, ValidModelImports) { EXPECT_EQ(importError(base()), ""); }

TEST_F(BadInput, TruncatedAndRandomBytes) {
  std::string bytes = base().SerializeAsString();
  for (size_t cut : {bytes.size() / 2, bytes.size() - 3, size_t(1)}) {
    std::ofstream(model, std::ios::binary) << bytes.substr(0, cut);
    EXPECT_NE(importFileError(), "") << "cut at " << cut;
  }
  std::mt19937 rng(42);
  for (int round = 0; round < 50; ++round) {
    std::string noise(1 + rng() % 4096, '\0');
    for (char& c : noise) c = (char)rng();
    std::ofstream(model, std::ios::binary) << noise;
    EXPECT_NE(importFileError(), "");
  }
  std::ofstream(model, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  EXPECT_CONTAINS(importFileError(), "not a valid ONNX model");
}

TEST_F(BadInput, TensorSizeDisagreesWithShape) {
  auto m = base();
  addWeight(m, {2})->set_raw_data(std::string(3, '\0'));
  EXPECT_CONTAINS(importError(m), "initializer 'w': raw data has 3 bytes, expected 8 for f32[2]");
  m = base();
  auto* t = addWeight(m, {3});
  t->add_float_data(1);
  EXPECT_CONTAINS(importError(m), "initializer 'w': holds 1 values, expected 3");
}

TEST_F(BadInput, NegativeAndEnormousDims) {
  auto m = base();
  addWeight(m, {-1});
  EXPECT_CONTAINS(importError(m), "initializer 'w': negative dim -1");
  m = base();
  addWeight(m, {int64_t(1) << 40, int64_t(1) << 40});
  EXPECT_CONTAINS(importError(m), "initializer 'w': too many elements");
  m = base();
  m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0)->set_dim_value(-3);
  EXPECT_CONTAINS(importError(m), "input 'x' has negative dim -3");
  m = base();
  m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0)->set_dim_value(int64_t(1) << 50);
  EXPECT_CONTAINS(importError(m), "too large");
}

TEST_F(BadInput, CycleAndUndefinedInput) {
  auto m = base();
  auto* g = m.mutable_graph();
  g->mutable_node(0)->set_input(0, "z");
  auto* n = g->add_node();
  n->set_name("neg");
  n->set_op_type("Neg");
  n->add_input("y");
  n->add_output("z");
  EXPECT_CONTAINS(importError(m), "the graph has a cycle through input");
  m = base();
  m.mutable_graph()->mutable_node(0)->set_input(0, "nope");
  EXPECT_CONTAINS(importError(m), "node 'relu' (Relu): input 'nope' is not defined");
}

TEST_F(BadInput, UnknownDTypeAndOp) {
  auto m = base();
  m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(99);
  EXPECT_CONTAINS(importError(m), "input 'x' has unsupported or unknown dtype code 99");
  m = base();
  m.mutable_graph()->mutable_node(0)->set_op_type("FooBar");
  EXPECT_CONTAINS(importError(m), "node 'relu' (FooBar): op FooBar (opset 17) is not supported");
  m = base();
  m.mutable_graph()->mutable_node(0)->set_op_type("SumTo"); // an op of sgc's IR, not of ONNX
  EXPECT_CONTAINS(importError(m), "op SumTo (opset 17) is not supported");
  m = base();
  m.mutable_graph()->mutable_node(0)->set_domain("com.example");
  EXPECT_CONTAINS(importError(m), "node 'relu' (Relu): ops of domain 'com.example' are not supported");
  m = base();
  m.mutable_opset_import(0)->set_version(5);
  EXPECT_CONTAINS(importError(m), "opset 5 is not supported");
}

TEST_F(BadInput, ShapeErrorsNameTheNode) {
  auto m = base();
  auto* n = m.mutable_graph()->mutable_node(0);
  n->set_op_type("MatMul");
  n->add_input("x");
  m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(3);
  EXPECT_CONTAINS(importError(m), "node 'relu' (MatMul): inner dims differ");
}

TEST_F(BadInput, ExternalDataStaysInTheModelFolder) {
  std::ofstream(dir / "model" / "weights.bin", std::ios::binary) << std::string(8, '\1');
  std::ofstream(dir / "outside.bin", std::ios::binary) << std::string(8, '\1');
  fs::create_symlink(dir / "outside.bin", dir / "model" / "link.bin");
  auto withLocation = [&](const std::string& location) {
    auto m = base();
    auto* t = addWeight(m, {2});
    t->set_data_location(onnx::TensorProto::EXTERNAL);
    auto* kv = t->add_external_data();
    kv->set_key("location");
    kv->set_value(location);
    return importError(m);
  };
  EXPECT_EQ(withLocation("weights.bin"), "");
  EXPECT_CONTAINS(withLocation((dir / "outside.bin").string()), "must be a relative path inside the model's folder");
  EXPECT_CONTAINS(withLocation("../outside.bin"), "leaves the model's folder");
  EXPECT_CONTAINS(withLocation("sub/../../outside.bin"), "leaves the model's folder");
  EXPECT_CONTAINS(withLocation("link.bin"), "resolves outside the model's folder");
  EXPECT_CONTAINS(withLocation("missing.bin"), "is not a regular file");
  std::ofstream(dir / "model" / "short.bin", std::ios::binary) << std::string(5, '\1');
  EXPECT_CONTAINS(withLocation("short.bin"), "is too short");
}

} // namespace
