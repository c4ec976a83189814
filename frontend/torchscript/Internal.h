// Declarations shared by the TorchScript frontend's files: the values the
// import-time evaluator works with, and the per-archive state.
#pragma once
#include "frontend/torchscript/Archive.h"
#include "frontend/torchscript/Importer.h"
#include "frontend/torchscript/Pickle.h"
#include "frontend/torchscript/Script.h"

#include <functional>
#include <map>
#include <memory>
#include <set>

namespace sgc::ts_import {

/// A tensor variable. In-place ops give the box a new IR value, so every name bound to the
/// tensor sees it; a box made by a view op (slice, select) writes through to its base.
struct TensorBox {
  ir::Value* v = nullptr;
  std::shared_ptr<TensorBox> base; ///< the tensor this is a view of (nullptr: none)
  enum class View { None, Slice, Select } view = View::None;
  int64_t axis = 0, start = 0, end = 0, step = 1; ///< Slice: [start, end) by step along axis; Select: index start
};
using Box = std::shared_ptr<TensorBox>;

/// A value of the evaluated code.
struct Val {
  enum class K { None, Bool, Int, Float, Str, Device, List, Tuple, Tensor, Module, Namespace } k = K::None;
  int64_t i = 0;         ///< Bool, Int
  double f = 0;          ///< Float
  std::string s;         ///< Str; Device; Namespace ("torch", "ops.prim"); Module: its dotted path
  std::vector<Val> items; ///< List, Tuple
  Box t;                 ///< Tensor
  Py obj = nullptr;      ///< Module: the pickled object

  static Val none() { return {}; }
  static Val boolean(bool b) { Val v; v.k = K::Bool; v.i = b; return v; }
  static Val integer(int64_t x) { Val v; v.k = K::Int; v.i = x; return v; }
  static Val real(double x) { Val v; v.k = K::Float; v.f = x; return v; }
  static Val str(std::string x) { Val v; v.k = K::Str; v.s = std::move(x); return v; }
  static Val tensor(ir::Value* x) { Val v; v.k = K::Tensor; v.t = std::make_shared<TensorBox>(); v.t->v = x; return v; }
  static Val list(std::vector<Val> x, bool tuple = false) { Val v; v.k = tuple ? K::Tuple : K::List; v.items = std::move(x); return v; }
  bool isNumber() const { return k == K::Int || k == K::Float || k == K::Bool; }
};
std::string describe(const Val& v);

struct Ctx;

/// An aten (or prim) call being imported: its arguments, and where it is.
struct Call {
  Ctx& c;
  std::string op;   ///< "add", "prim.NumToTensor"
  std::vector<Val> args;
  std::map<std::string, Val> kwargs;
  std::string where; ///< "file:line"

  /// Argument `i`, or the keyword `name`, or nullptr.
  const Val* arg(size_t i, const std::string& name) const;
  Error fail(const std::string& msg) const;
  /// Typed accessors: an error names the op and the argument.
  Expected<ir::Value*> tensor(size_t i, const std::string& name) const;
  Expected<ir::Value*> tensorOr(size_t i, const std::string& name) const; ///< nullptr when absent or None
  Expected<int64_t> integer(size_t i, const std::string& name) const;
  int64_t integerOr(size_t i, const std::string& name, int64_t def) const;
  Expected<double> real(size_t i, const std::string& name) const;
  double realOr(size_t i, const std::string& name, double def) const;
  bool flag(size_t i, const std::string& name, bool def) const;
  Expected<std::vector<int64_t>> ints(size_t i, const std::string& name) const;
  std::string strOr(size_t i, const std::string& name, const std::string& def) const;
};

using AtenFn = Expected<Val> (*)(Call&);
/// The handler of an aten op by its name, nullptr when sgc has none (Aten.def).
AtenFn atenHandler(const std::string& name);

/// Per-archive state.
struct Ctx {
  Ctx(ir::Graph& g, const Archive& a, std::string f) : graph(g), archive(a), file(std::move(f)) {}
  ir::Graph& graph;
  const Archive& archive;
  std::string file;
  std::map<std::string, CodeFile> code;                 ///< parsed code files, by qualifier
  std::vector<std::unique_ptr<Pickled>> pickles;        ///< keeps the unpickled objects alive
  std::vector<ir::Value*> constants;                    ///< CONSTANTS.cN
  std::map<Py, ir::Value*> tensors;                     ///< each pickled tensor's IR value
  std::map<Py, std::string> paths;                      ///< each module or tensor's first dotted path
  std::set<Py> params;                                  ///< the tensors that are the module's parameters
  std::map<Py, size_t> order;                           ///< each tensor's place in the module tree (state_dict order)
  int depth = 0;                                        ///< method calls being evaluated
  std::string where;                                    ///< the statement being evaluated ("archive: code/...py:12"), for errors
  std::string site;                                     ///< the same, short ("modeling_gpt2.py:12"): node names

  // Building IR (Emit.cpp): each node's type is inferred as it is made, and a node of
  // constant inputs is folded into a constant, so shapes and sizes are known at once.
  Expected<ir::Value*> op(ir::Op op, std::vector<ir::Value*> ins, std::map<std::string, ir::Attr> attrs = {});
  Expected<std::vector<ir::Value*>> ops(ir::Op op, std::vector<ir::Value*> ins, int outputs, std::map<std::string, ir::Attr> attrs = {});
  ir::Value* ints(const std::vector<int64_t>& v);
  ir::Value* scalar(double v, ir::DType t);
  ir::Value* constant(ir::Tensor t, const std::string& base = "const");
  /// The value of a constant (nullptr when it is not one).
  static const ir::Tensor* known(const ir::Value* v);

  /// The tensor of a pickled tensor (its storage read from `folder`); `path` names it.
  Expected<ir::Value*> tensorOf(Py t, const std::string& folder, bool param, const std::string& path);
  /// Evaluates `method` of module value `self` on `args`.
  Expected<Val> callMethod(const Val& self, const std::string& method, std::vector<Val> args);
  /// The class definition of a pickled module.
  Expected<const ClassDef*> classOf(Py obj);
  /// Evaluates a function of the code (`__torch__....f`).
  Expected<Val> callFunction(const std::string& qualified, std::vector<Val> args, const std::string& where);
  Expected<const CodeFile*> codeFile(const std::string& qualifier);
  /// The model's Python source of bytes [pos, end) of code entry `entry` ("path.py:12" or, traced,
  /// "path.py:12, in forward"), from the entry's .debug_pkl; "" when the archive does not say.
  std::string sourceAt(const std::string& entry, size_t pos, size_t end);
  size_t pos = 0, end = 0; ///< the bytes of the statement being evaluated, in its code file
  std::string entry;   ///< the code file being evaluated (its archive entry)
};

/// Runs a def's body with `args` bound to its parameters (Interpreter.cpp).
Expected<Val> evalDef(Ctx& c, const Def& d, const std::string& file, std::vector<Val> args);

/// Dtypes of torch's ScalarType codes and storage classes.
std::optional<ir::DType> dtypeOfScalarType(int64_t code);
std::optional<ir::DType> dtypeOfStorage(const std::string& storageType);

/// Assigns `v` to the tensor in `box` in place (writing through the views it is of).
Error assignInPlace(Ctx& c, const Box& box, ir::Value* v);

} // namespace sgc::ts_import
