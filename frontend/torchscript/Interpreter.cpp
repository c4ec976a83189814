// The import-time evaluator of TorchScript code (see Internal.h): binds
// names, evaluates expressions to values, resolves module attributes and
// method calls, runs constant `if`s, and hands aten calls to their handlers.
#include "frontend/torchscript/Internal.h"

#include "ir/Type.h"

#include <cmath>

namespace sgc::ts_import {

std::string describe(const Val& v) {
  switch (v.k) {
  case Val::K::None: return "None";
  case Val::K::Bool: return v.i ? "True" : "False";
  case Val::K::Int: return std::to_string(v.i);
  case Val::K::Float: return "a float";
  case Val::K::Str: return "\"" + v.s + "\"";
  case Val::K::Device: return "device " + v.s;
  case Val::K::List: return "a list of " + std::to_string(v.items.size());
  case Val::K::Tuple: return "a tuple of " + std::to_string(v.items.size());
  case Val::K::Tensor: return "a tensor " + ir::toString(v.t->v->type);
  case Val::K::Module: return "the module " + (v.s.empty() ? std::string("(root)") : v.s);
  case Val::K::Namespace: return v.s;
  }
  return "a value";
}

namespace {

constexpr int kMaxCallDepth = 256;
constexpr size_t kMaxIterations = 1 << 20; ///< of one loop, and items of one list

struct Frame {
  Ctx& c;
  const std::string& file;
  std::map<std::string, Val> names;
  bool returned = false;
  Val result;

  std::string at(int line) const { return file + ":" + std::to_string(line); }
  Error fail(int line, const std::string& m) const { return makeError(at(line) + ": " + m); }

  Expected<Val> name(const Expr& e) {
    auto it = names.find(e.s);
    if (it != names.end()) return it->second;
    static const char* spaces[] = {"torch", "ops", "__torch__", "CONSTANTS", "math"};
    for (const char* s : spaces)
      if (e.s == s) {
        Val v;
        v.k = Val::K::Namespace;
        v.s = s;
        return v;
      }
    if (e.s == "None") return Val::none();
    if (e.s == "True" || e.s == "False") return Val::boolean(e.s == "True");
    if (e.s == "inf") return Val::real(INFINITY);
    if (e.s == "nan") return Val::real(NAN);
    Val builtin;
    builtin.k = Val::K::Namespace;
    builtin.s = "builtin." + e.s;
    return builtin;
  }

  Expected<Val> attr(const Expr& e) {
    auto base = eval(*e.args[0]);
    if (!base) return base.takeError();
    if (base->k == Val::K::Namespace) {
      if (base->s == "CONSTANTS") {
        if (e.s.size() < 2 || e.s[0] != 'c') return fail(e.line, "CONSTANTS." + e.s + " is not a constant's name");
        size_t i = strtoull(e.s.c_str() + 1, nullptr, 10);
        if (i >= c.constants.size()) return fail(e.line, "CONSTANTS." + e.s + ": the archive has " + std::to_string(c.constants.size()) + " constants");
        return Val::tensor(c.constants[i]);
      }
      Val v = *base;
      v.s += "." + e.s;
      return v;
    }
    if (base->k == Val::K::Module) return moduleAttr(*base, e.s, e.line);
    if (base->k == Val::K::Tensor) return tensorAttr(*base, e.s, e.line);
    return fail(e.line, "." + e.s + " of " + describe(*base));
  }

  Expected<Val> tensorAttr(const Val& t, const std::string& a, int line) {
    const ir::Type& ty = t.t->v->type;
    if (a == "shape") {
      std::vector<Val> dims;
      for (int64_t d : ty.shape()) dims.push_back(Val::integer(d));
      return Val::list(dims);
    }
    if (a == "device") {
      Val d;
      d.k = Val::K::Device;
      d.s = "cpu";
      return d;
    }
    return fail(line, "tensor attribute ." + a + " is not supported");
  }

  Expected<Val> moduleAttr(const Val& m, const std::string& a, int line) {
    Py v = m.obj->attr(a);
    if (!v) return fail(line, describe(m) + " (" + m.obj->s + ") has no attribute '" + a + "'");
    std::string path = m.s.empty() ? a : m.s + "." + a;
    switch (v->kind) {
    case PyObj::Kind::Object: {
      Val r;
      r.k = Val::K::Module;
      r.obj = v;
      r.s = c.paths.count(v) ? c.paths[v] : path;
      return r;
    }
    case PyObj::Kind::Tensor: {
      auto t = c.tensorOf(v, "data", c.params.count(v) > 0, c.paths.count(v) ? c.paths[v] : path);
      if (!t) return makeError(at(line) + ": " + errorText(t.takeError()));
      Val r = Val::tensor(*t);
      return r;
    }
    case PyObj::Kind::None: return Val::none();
    case PyObj::Kind::Bool: return Val::boolean(v->i);
    case PyObj::Kind::Int: return Val::integer(v->i);
    case PyObj::Kind::Float: return Val::real(v->f);
    case PyObj::Kind::Str: return Val::str(v->s);
    default: return fail(line, "attribute '" + a + "' of " + describe(m) + " is " + kindName(*v) + ", which sgc cannot read");
    }
  }

  Expected<Val> call(const Expr& e) {
    const Expr& callee = *e.args[0];
    bool cast = callee.kind == Expr::Kind::Name && (callee.s == "annotate" || callee.s == "unchecked_cast") && !names.count(callee.s);
    if (cast) { // annotate(TYPE, value), unchecked_cast(TYPE, value): the type is not evaluated
      if (e.args.size() != 3) return fail(e.line, callee.s + "() takes a type and a value");
      return eval(*e.args[2]);
    }
    // torch.append(list, x) appends to the list a name holds (scripted code builds lists so).
    bool append = callee.kind == Expr::Kind::Attr && callee.s == "append" && callee.args[0]->kind == Expr::Kind::Name && callee.args[0]->s == "torch";
    if (append) {
      if (e.args.size() != 3 || e.args[1]->kind != Expr::Kind::Name || !names.count(e.args[1]->s) || names[e.args[1]->s].k != Val::K::List)
        return fail(e.line, "torch.append() of a list held by a name");
      auto x = eval(*e.args[2]);
      if (!x) return x.takeError();
      Val& list = names[e.args[1]->s];
      if (list.items.size() >= kMaxIterations) return fail(e.line, "a list of more than " + std::to_string(kMaxIterations) + " items");
      list.items.push_back(std::move(*x));
      return list;
    }
    std::vector<Val> args;
    std::map<std::string, Val> kwargs;
    for (size_t i = 1; i < e.args.size(); ++i) {
      auto a = eval(*e.args[i]);
      if (!a) return a.takeError();
      args.push_back(std::move(*a));
    }
    for (const auto& [k, x] : e.kwargs) {
      auto a = eval(*x);
      if (!a) return a.takeError();
      kwargs[k] = std::move(*a);
    }
    // A method of a module: (m).forward(...)
    if (callee.kind == Expr::Kind::Attr) {
      auto self = eval(*callee.args[0]);
      if (!self) return self.takeError();
      if (self->k == Val::K::Module) {
        if (!kwargs.empty()) return fail(e.line, "keyword arguments to a module's method are not supported");
        return c.callMethod(*self, callee.s, std::move(args));
      }
    }
    auto fn = eval(callee);
    if (!fn) return fn.takeError();
    if (fn->k != Val::K::Namespace) return fail(e.line, "calls " + describe(*fn) + ", which is not a function");
    return builtin(fn->s, std::move(args), std::move(kwargs), e.line);
  }

  Expected<Val> builtin(const std::string& fn, std::vector<Val> args, std::map<std::string, Val> kwargs, int line) {
    auto one = [&]() -> Expected<Val> {
      if (args.size() != 1) return fail(line, fn.substr(8) + "() takes one argument");
      return args[0];
    };
    if (fn == "builtin.int" || fn == "builtin.float" || fn == "builtin.bool") {
      auto a = one();
      if (!a) return a.takeError();
      Val v = *a;
      if (v.k == Val::K::Tensor) { // a 0-d tensor of a size: known at import
        const ir::Tensor* t = Ctx::known(v.t->v);
        if (!t || t->numel() != 1) return fail(line, fn.substr(8) + "() of a tensor whose value is not known when the model is read (" + describe(v) + ")");
        v = ir::isFloat(t->dtype) ? Val::real(t->getF(0)) : Val::integer(t->getI(0));
      }
      if (!v.isNumber()) return fail(line, fn.substr(8) + "() of " + describe(v));
      double x = v.k == Val::K::Float ? v.f : (double)v.i;
      if (fn == "builtin.int") return Val::integer(v.k == Val::K::Float ? (int64_t)std::trunc(v.f) : v.i);
      if (fn == "builtin.float") return Val::real(x);
      return Val::boolean(x != 0);
    }
    if (fn == "builtin.getattr") {
      if (args.size() != 2 || args[0].k != Val::K::Module || args[1].k != Val::K::Str) return fail(line, "getattr() takes a module and a name");
      return moduleAttr(args[0], args[1].s, line);
    }
    if (fn == "builtin.len") {
      auto a = one();
      if (!a) return a.takeError();
      if (a->k == Val::K::List || a->k == Val::K::Tuple) return Val::integer((int64_t)a->items.size());
      if (a->k == Val::K::Tensor && a->t->v->type.rank() > 0) return Val::integer(a->t->v->type.shape()[0]);
      return fail(line, "len() of " + describe(*a));
    }
    if (fn == "builtin.uninitialized") return Val::none();
    if (fn == "builtin.range") {
      std::vector<int64_t> r;
      for (const Val& a : args) {
        if (a.k != Val::K::Int) return fail(line, "range() of " + describe(a));
        r.push_back(a.i);
      }
      int64_t start = r.size() > 1 ? r[0] : 0, end = r.size() > 1 ? r[1] : r.empty() ? 0 : r[0], step = r.size() > 2 ? r[2] : 1;
      if (r.empty() || r.size() > 3 || step == 0) return fail(line, "range() takes 1 to 3 ints and a step that is not 0");
      std::vector<Val> items;
      for (int64_t i = start; step > 0 ? i < end : i > end; i += step) {
        if (items.size() >= kMaxIterations) return fail(line, "a range of more than " + std::to_string(kMaxIterations) + " steps");
        items.push_back(Val::integer(i));
      }
      return Val::list(items);
    }
    if (fn == "builtin.getitem") {
      if (args.size() != 2 || (args[0].k != Val::K::List && args[0].k != Val::K::Tuple) || args[1].k != Val::K::Int) return fail(line, "[] of " + (args.empty() ? std::string("nothing") : describe(args[0])));
      int64_t n = (int64_t)args[0].items.size(), k = args[1].i < 0 ? args[1].i + n : args[1].i;
      if (k < 0 || k >= n) return fail(line, "index " + std::to_string(args[1].i) + " of " + describe(args[0]));
      return args[0].items[k];
    }
    if (fn.rfind("__torch__.", 0) == 0) return c.callFunction(fn, std::move(args), at(line));
    std::string op;
    if (fn.rfind("torch.", 0) == 0) op = fn.substr(6);
    else if (fn.rfind("ops.aten.", 0) == 0) op = fn.substr(9);
    else if (fn.rfind("ops.prim.", 0) == 0) op = "prim." + fn.substr(9);
    else if (fn.rfind("builtin.", 0) == 0) return fail(line, fn.substr(8) + "() is not supported");
    else op = fn;
    // Scripted code's arithmetic and logic on numbers, strings and None.
    std::string pyop = operatorOf(op);
    bool numbers = !args.empty() && kwargs.empty();
    for (const Val& a : args) numbers = numbers && a.k != Val::K::Tensor && a.k != Val::K::List && a.k != Val::K::Tuple;
    if (numbers && !pyop.empty() && args.size() == 2) return arith(pyop, args[0], args[1], line);
    if (numbers && op == "neg" && args.size() == 1) return arith("-", Val::integer(0), args[0], line);
    if (op == "warn") return Val::none();
    if (op == "format" && !args.empty() && args[0].k == Val::K::Str) return args[0];
    if (op == "prim.RaiseException")
      return fail(line, "the model raises " + (args.size() > 1 && args[1].k == Val::K::Str ? args[1].s : std::string("an exception")) +
                            (args.empty() || args[0].k != Val::K::Str ? std::string() : ": " + args[0].s) + " (on the path the import took)");
    if (op == "len" || op == "__getitem__" || op == "list") {
      std::vector<Val> a = args;
      if (op == "list") return a.empty() ? Val::list({}) : a[0];
      return builtin("builtin." + std::string(op == "len" ? "len" : "getitem"), a, {}, line);
    }
    if (op == "device") {
      Val d;
      d.k = Val::K::Device;
      d.s = args.empty() || args[0].k != Val::K::Str ? "cpu" : args[0].s;
      return d;
    }
    AtenFn h = atenHandler(op);
    // An in-place variant not listed itself: the op, then its result written into its first argument.
    bool inPlace = !h && op.size() > 1 && op.back() == '_' && op.compare(0, 2, "__") != 0 && (h = atenHandler(op.substr(0, op.size() - 1)));
    Call call{c, inPlace ? op.substr(0, op.size() - 1) : op, std::move(args), std::move(kwargs), at(line)};
    if (inPlace) {
      if (call.args.empty() || call.args[0].k != Val::K::Tensor) return fail(line, "aten::" + op + " writes into " + (call.args.empty() ? "nothing" : describe(call.args[0])));
      Val self = call.args[0];
      auto r = h(call);
      if (!r) return r.takeError();
      if (r->k != Val::K::Tensor) return fail(line, "aten::" + op + " gives " + describe(*r) + ", not a tensor");
      if (Error e = assignInPlace(c, self.t, r->t->v)) return e;
      return self;
    }
    if (!h) {
      std::string sig;
      for (const Val& a : call.args) sig += (sig.empty() ? "" : ", ") + kindOf(a);
      for (const auto& [k, a] : call.kwargs) sig += (sig.empty() ? "" : ", ") + k + "=" + kindOf(a);
      return fail(line, "aten::" + op + "(" + sig + ") is not supported by sgc's TorchScript frontend");
    }
    return h(call);
  }

  static std::string kindOf(const Val& a) {
    switch (a.k) {
    case Val::K::Tensor: return "Tensor";
    case Val::K::Int: return "int";
    case Val::K::Float: return "float";
    case Val::K::Bool: return "bool";
    case Val::K::Str: return "str";
    case Val::K::None: return "None";
    case Val::K::List: return "List";
    case Val::K::Tuple: return "Tuple";
    case Val::K::Device: return "Device";
    default: return "?";
    }
  }

  Expected<Val> unary(const Expr& e) {
    auto a = eval(*e.args[0]);
    if (!a) return a.takeError();
    if (e.s == "-" && a->k == Val::K::Int) return Val::integer(a->i == INT64_MIN ? INT64_MIN : -a->i);
    if (e.s == "-" && a->k == Val::K::Float) return Val::real(-a->f);
    if (e.s == "not" && a->isNumber()) return Val::boolean(a->k == Val::K::Float ? a->f == 0 : a->i == 0);
    if (e.s == "not" && a->k == Val::K::None) return Val::boolean(true);
    return fail(e.line, "'" + e.s + "' of " + describe(*a));
  }

  Expected<Val> binary(const Expr& e) {
    auto a = eval(*e.args[0]);
    if (!a) return a.takeError();
    auto b = eval(*e.args[1]);
    if (!b) return b.takeError();
    return arith(e.s, *a, *b, e.line);
  }

  /// Python's operators on numbers (and `is`, and == on strings): scripted code's integer and
  /// boolean logic, written as operators or as aten calls on numbers (torch.add(i, 1)).
  Expected<Val> arith(const std::string& op, const Val& a, const Val& b, int line) {
    if (op == "is" || op == "is not") {
      bool same = (a.k == Val::K::None) == (b.k == Val::K::None) && (a.k != Val::K::None || b.k == Val::K::None);
      return Val::boolean(op == "is" ? same : !same);
    }
    if (a.k == Val::K::Str && b.k == Val::K::Str && (op == "==" || op == "!=")) return Val::boolean((a.s == b.s) == (op == "=="));
    if (!a.isNumber() || !b.isNumber()) return fail(line, "'" + op + "' of " + describe(a) + " and " + describe(b));
    bool real = a.k == Val::K::Float || b.k == Val::K::Float || op == "/";
    double x = a.k == Val::K::Float ? a.f : (double)a.i, y = b.k == Val::K::Float ? b.f : (double)b.i;
    int64_t i = a.i, j = b.i;
    if (op == "==") return Val::boolean(x == y);
    if (op == "!=") return Val::boolean(x != y);
    if (op == "<") return Val::boolean(x < y);
    if (op == "<=") return Val::boolean(x <= y);
    if (op == ">") return Val::boolean(x > y);
    if (op == ">=") return Val::boolean(x >= y);
    if (op == "and") return Val::boolean(x != 0 && y != 0);
    if (op == "or") return Val::boolean(x != 0 || y != 0);
    if (real) {
      if (op == "+") return Val::real(x + y);
      if (op == "-") return Val::real(x - y);
      if (op == "*") return Val::real(x * y);
      if (op == "/") return Val::real(x / y);
      if (op == "//") return Val::real(std::floor(x / y));
      if (op == "**") return Val::real(std::pow(x, y));
      if (op == "%") return Val::real(x - std::floor(x / y) * y);
    } else {
      if ((op == "//" || op == "%") && j == 0) return fail(line, "integer division by zero");
      auto wrap = [](uint64_t r) { return Val::integer((int64_t)r); };
      if (op == "+") return wrap((uint64_t)i + (uint64_t)j);
      if (op == "-") return wrap((uint64_t)i - (uint64_t)j);
      if (op == "*") return wrap((uint64_t)i * (uint64_t)j);
      if (op == "//") return Val::integer(i / j - ((i % j != 0) && ((i < 0) != (j < 0))));
      if (op == "%") return Val::integer(((i % j) + j) % j);
      if (op == "**") return Val::integer((int64_t)std::pow(x, y));
    }
    return fail(line, "operator '" + op + "' is not supported");
  }

  /// The Python operator of an aten op on numbers, "" for other ops.
  static std::string operatorOf(const std::string& op) {
    static const std::pair<const char*, const char*> ops[] = {
        {"add", "+"},  {"sub", "-"},   {"mul", "*"},  {"div", "/"},  {"floordiv", "//"}, {"floor_divide", "//"}, {"remainder", "%"},
        {"eq", "=="},  {"ne", "!="},   {"lt", "<"},   {"le", "<="},  {"gt", ">"},        {"ge", ">="},           {"pow", "**"},
        {"__and__", "and"}, {"__or__", "or"}, {"__is__", "is"}, {"__isnot__", "is not"}};
    for (const auto& [a, o] : ops)
      if (op == a) return o;
    return "";
  }

  Expected<Val> subscript(const Expr& e) {
    auto a = eval(*e.args[0]);
    if (!a) return a.takeError();
    auto i = eval(*e.args[1]);
    if (!i) return i.takeError();
    if ((a->k == Val::K::List || a->k == Val::K::Tuple) && i->k == Val::K::Int) {
      int64_t n = (int64_t)a->items.size(), k = i->i < 0 ? i->i + n : i->i;
      if (k < 0 || k >= n) return fail(e.line, "index " + std::to_string(i->i) + " of " + describe(*a));
      return a->items[k];
    }
    return fail(e.line, "indexing " + describe(*a) + " with " + describe(*i) + " is not supported");
  }

  Expected<Val> eval(const Expr& e) {
    switch (e.kind) {
    case Expr::Kind::Name: return name(e);
    case Expr::Kind::Int: return Val::integer(e.u > uint64_t(INT64_MAX) ? INT64_MIN : (int64_t)e.u);
    case Expr::Kind::Float: return Val::real(e.f);
    case Expr::Kind::Str: return Val::str(e.s);
    case Expr::Kind::Attr: return attr(e);
    case Expr::Kind::Call: return call(e);
    case Expr::Kind::List:
    case Expr::Kind::Tuple: {
      std::vector<Val> items;
      for (const auto& x : e.args) {
        auto v = eval(*x);
        if (!v) return v.takeError();
        items.push_back(std::move(*v));
      }
      return Val::list(std::move(items), e.kind == Expr::Kind::Tuple);
    }
    case Expr::Kind::Subscript: return subscript(e);
    case Expr::Kind::Unary: return unary(e);
    case Expr::Kind::Binary: return binary(e);
    }
    return fail(e.line, "an expression sgc cannot evaluate");
  }

  Error run(const std::vector<Stmt>& body) {
    for (const Stmt& s : body) {
      if (returned) return Error::success();
      c.where = at(s.line);
      c.pos = s.pos, c.end = s.end;
      c.site = file.substr(file.rfind('/') + 1) + ":" + std::to_string(s.line);
      switch (s.kind) {
      case Stmt::Kind::Pass: break;
      case Stmt::Kind::Return: {
        auto v = eval(*s.value);
        if (!v) return v.takeError();
        result = std::move(*v);
        returned = true;
        break;
      }
      case Stmt::Kind::Expr: {
        auto v = eval(*s.value);
        if (!v) return v.takeError();
        break;
      }
      case Stmt::Kind::Assign: {
        auto v = eval(*s.value);
        if (!v) return v.takeError();
        if (s.targets.size() == 1) {
          names[s.targets[0]] = std::move(*v);
          break;
        }
        if ((v->k != Val::K::Tuple && v->k != Val::K::List) || v->items.size() != s.targets.size())
          return fail(s.line, "unpacks " + describe(*v) + " into " + std::to_string(s.targets.size()) + " names");
        for (size_t i = 0; i < s.targets.size(); ++i) names[s.targets[i]] = v->items[i];
        break;
      }
      case Stmt::Kind::For: {
        auto seq = eval(*s.value);
        if (!seq) return seq.takeError();
        if (seq->k != Val::K::List && seq->k != Val::K::Tuple) return fail(s.line, "a 'for' over " + describe(*seq) + " (only lists and ranges known when the model is read)");
        for (const Val& item : seq->items) {
          if (s.targets.size() == 1) {
            names[s.targets[0]] = item;
          } else {
            if ((item.k != Val::K::Tuple && item.k != Val::K::List) || item.items.size() != s.targets.size()) return fail(s.line, "unpacks " + describe(item) + " into " + std::to_string(s.targets.size()) + " names");
            for (size_t i = 0; i < s.targets.size(); ++i) names[s.targets[i]] = item.items[i];
          }
          if (Error e = run(s.then)) return e;
          if (returned) break;
        }
        break;
      }
      case Stmt::Kind::If: {
        auto cond = eval(*s.value);
        if (!cond) return cond.takeError();
        if (cond->k == Val::K::Tensor) {
          const ir::Tensor* t = Ctx::known(cond->t->v);
          if (t && t->numel() == 1) *cond = Val::boolean(t->getF(0) != 0);
        }
        if (!cond->isNumber() && cond->k != Val::K::None)
          return fail(s.line, "an 'if' on " + describe(*cond) + ", which is not known when the model is read (data-dependent control flow is not supported)");
        bool taken = cond->k != Val::K::None && (cond->k == Val::K::Float ? cond->f != 0 : cond->i != 0);
        if (Error e = run(taken ? s.then : s.orelse)) return e;
        break;
      }
      }
    }
    return Error::success();
  }
};

} // namespace

Expected<Val> evalDef(Ctx& c, const Def& d, const std::string& file, std::vector<Val> args) {
  std::string at = file + ":" + std::to_string(d.line) + ": ";
  if (args.size() > d.params.size()) return makeError(at + d.name + "() takes " + std::to_string(d.params.size()) + " arguments, given " + std::to_string(args.size()));
  if (c.depth + 1 > kMaxCallDepth) return makeError(at + "calls nest deeper than " + std::to_string(kMaxCallDepth));
  Frame f{c, file, {}, false, {}};
  for (size_t i = 0; i < d.params.size(); ++i) {
    if (i < args.size()) {
      f.names[d.params[i]] = std::move(args[i]);
      continue;
    }
    if (!d.defaults[i]) return makeError(at + d.name + "() needs its argument '" + d.params[i] + "'");
    auto v = f.eval(*d.defaults[i]);
    if (!v) return v.takeError();
    f.names[d.params[i]] = std::move(*v);
  }
  ++c.depth;
  std::string saved = c.where, savedSite = c.site, savedEntry = c.entry;
  size_t savedPos = c.pos, savedEnd = c.end;
  size_t colon = file.rfind(": code/");
  c.entry = colon == std::string::npos ? "" : file.substr(colon + 2);
  Error e = f.run(d.body);
  if (e) { // the innermost frame names the model's own source line of the statement that failed
    std::string msg = errorText(std::move(e));
    std::string src = msg.find(" (model source: ") != std::string::npos || c.entry.empty() ? "" : c.sourceAt(c.entry, c.pos, c.end);
    e = makeError(src.empty() ? msg : msg + " (model source: " + src + ")");
  }
  --c.depth;
  c.where = saved, c.site = savedSite, c.entry = savedEntry, c.pos = savedPos, c.end = savedEnd;
  if (e) return e;
  return f.result;
}

} // namespace sgc::ts_import
