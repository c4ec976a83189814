// The serialized TorchScript code of an archive (code/__torch__/....py): the
// Python subset torch's printer writes, parsed into a small syntax tree. A
// file holds classes (a module's parameters, buffers, attribute types and
// methods) and functions; method bodies are straight-line statements with
// `if` where scripting kept one. Errors give the file and line.
#pragma once
#include "ir/Error.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace sgc::ts_import {

struct Expr {
  enum class Kind { Name, Int, Float, Str, Attr, Call, List, Tuple, Subscript, Unary, Binary } kind;
  std::string s;    ///< Name, Str, Attr (the attribute), Unary/Binary (the operator: "-", "not", "+", "==", ...)
  uint64_t u = 0;   ///< Int: the literal's magnitude (a unary minus may make it INT64_MIN)
  double f = 0;     ///< Float
  std::vector<std::unique_ptr<Expr>> args;                         ///< operands; a Call's callee is args[0]
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs; ///< a Call's keyword arguments
  int line = 0;
};

struct Stmt {
  enum class Kind { Assign, Return, If, For, Pass, Expr } kind;
  std::vector<std::string> targets; ///< Assign: the names bound (several: a tuple unpacked); For: the loop's names
  std::unique_ptr<Expr> value;      ///< Assign/Return/Expr: the value; If: the condition; For: what it iterates
  std::vector<Stmt> then, orelse;   ///< If; For: its body in then
  int line = 0;
  size_t pos = 0, end = 0; ///< its bytes in the code file (what its .debug_pkl maps to the model's source)
};

struct Def {
  std::string name;
  std::vector<std::string> params, types;        ///< the first of a method is self
  std::vector<std::unique_ptr<Expr>> defaults;   ///< each parameter's default value (nullptr: none)
  std::vector<Stmt> body;
  int line = 0;
};

struct ClassDef {
  std::string name; ///< qualified: "__torch__.torch.nn.modules.linear.Linear"
  std::string file; ///< the code file, for errors
  std::vector<std::string> parameters, buffers;
  std::map<std::string, Def> methods;
  int line = 0;
};

/// The classes and functions of one code file. `qualifier` is the file's module path
/// ("__torch__.torch.nn.modules.linear"); `file` names it in errors.
struct CodeFile {
  std::map<std::string, ClassDef> classes; ///< by qualified name
  std::map<std::string, Def> functions;    ///< by qualified name
};
Expected<CodeFile> parseCode(const std::string& text, const std::string& qualifier, const std::string& file);

} // namespace sgc::ts_import
