// Tokenizer and recursive-descent parser of serialized TorchScript code (see
// Script.h). Indentation gives blocks, as in Python; newlines inside brackets
// are ignored.
#include "frontend/torchscript/Script.h"

#include <cstdlib>

namespace sgc::ts_import {
namespace {

struct Token {
  enum class Kind { Name, Int, Float, Str, Op, Newline, Indent, Dedent, End } kind;
  std::string s;
  uint64_t u = 0;
  double f = 0;
  int line = 0;
  size_t pos = 0; ///< byte offset in the file
};
using T = Token::Kind;

constexpr int kMaxDepth = 200; ///< nesting of expressions and blocks

class Lexer {
public:
  Lexer(const std::string& text, const std::string& file) : t_(text), file_(file) {}

  Expected<std::vector<Token>> run() {
    std::vector<int> indents{0};
    bool lineStart = true;
    int depth = 0;
    while (p_ < t_.size()) {
      if (lineStart && depth == 0) {
        size_t q = p_;
        int col = 0;
        while (q < t_.size() && (t_[q] == ' ' || t_[q] == '\t')) ++q, ++col;
        if (q < t_.size() && (t_[q] == '\n' || t_[q] == '#' || t_[q] == '\r')) { // blank or comment line
          while (q < t_.size() && t_[q] != '\n') ++q;
          p_ = q + 1;
          ++line_;
          continue;
        }
        p_ = q;
        if (q >= t_.size()) break;
        if (col > indents.back()) {
          indents.push_back(col);
          push({T::Indent, "", 0, 0, line_});
        }
        while (col < indents.back()) {
          indents.pop_back();
          push({T::Dedent, "", 0, 0, line_});
        }
        if (col != indents.back()) return fail("inconsistent indentation");
        lineStart = false;
      }
      char c = t_[p_];
      start_ = p_;
      if (c == '\n') {
        ++p_;
        if (depth == 0) {
          push({T::Newline, "", 0, 0, line_});
          lineStart = true;
        }
        ++line_;
        continue;
      }
      if (c == ' ' || c == '\t' || c == '\r') { ++p_; continue; }
      if (c == '#') {
        while (p_ < t_.size() && t_[p_] != '\n') ++p_;
        continue;
      }
      if (c == '\\' && p_ + 1 < t_.size() && t_[p_ + 1] == '\n') { p_ += 2; ++line_; continue; }
      if (isalpha((unsigned char)c) || c == '_') {
        size_t q = p_;
        while (q < t_.size() && (isalnum((unsigned char)t_[q]) || t_[q] == '_')) ++q;
        push({T::Name, t_.substr(p_, q - p_), 0, 0, line_});
        p_ = q;
        continue;
      }
      if (isdigit((unsigned char)c) || (c == '.' && p_ + 1 < t_.size() && isdigit((unsigned char)t_[p_ + 1]))) {
        if (Error e = number()) return e;
        continue;
      }
      if (c == '"' || c == '\'') {
        if (Error e = string()) return e;
        continue;
      }
      static const char* ops[] = {"**", "//", "==", "!=", "<=", ">=", "->", "(", ")", "[", "]", ",", ":", ".", "=", "+", "-", "*", "/", "%", "<", ">", "&", "|", "^", "~", "@"};
      bool matched = false;
      for (const char* op : ops) {
        size_t n = strlen(op);
        if (t_.compare(p_, n, op) == 0) {
          push({T::Op, op, 0, 0, line_});
          if (*op == '(' || *op == '[') ++depth;
          if ((*op == ')' || *op == ']') && --depth < 0) return fail("unbalanced '" + std::string(op) + "'");
          if (depth > kMaxDepth) return fail("brackets nest deeper than " + std::to_string(kMaxDepth));
          p_ += n;
          matched = true;
          break;
        }
      }
      if (!matched) return fail(std::string("unexpected character '") + c + "'");
    }
    push({T::Newline, "", 0, 0, line_});
    for (size_t i = 1; i < indents.size(); ++i) push({T::Dedent, "", 0, 0, line_});
    push({T::End, "", 0, 0, line_});
    return std::move(out_);
  }

private:
  const std::string& t_;
  std::string file_;
  size_t p_ = 0;
  int line_ = 1;
  std::vector<Token> out_;

  Error fail(const std::string& m) const { return makeError(file_ + ":" + std::to_string(line_) + ": " + m); }
  size_t start_ = 0; ///< where the token being read starts
  void push(Token t) {
    t.pos = start_;
    out_.push_back(std::move(t));
  }

  Error number() {
    size_t q = p_;
    bool isFloat = false;
    while (q < t_.size() && isdigit((unsigned char)t_[q])) ++q;
    if (q < t_.size() && t_[q] == '.') isFloat = true, ++q;
    while (q < t_.size() && isdigit((unsigned char)t_[q])) ++q;
    if (q < t_.size() && (t_[q] == 'e' || t_[q] == 'E')) {
      isFloat = true, ++q;
      if (q < t_.size() && (t_[q] == '+' || t_[q] == '-')) ++q;
      if (q >= t_.size() || !isdigit((unsigned char)t_[q])) return fail("a number's exponent has no digits");
      while (q < t_.size() && isdigit((unsigned char)t_[q])) ++q;
    }
    std::string s = t_.substr(p_, q - p_);
    Token tok{isFloat ? T::Float : T::Int, s, 0, 0, line_};
    if (isFloat) {
      tok.f = strtod(s.c_str(), nullptr);
    } else {
      if (s.size() > 20) return fail("the integer " + s + " does not fit 64 bits");
      errno = 0;
      tok.u = strtoull(s.c_str(), nullptr, 10);
      if (errno || tok.u > uint64_t(INT64_MAX) + 1) return fail("the integer " + s + " does not fit 64 bits");
    }
    push(tok);
    p_ = q;
    return Error::success();
  }

  Error string() {
    char quote = t_[p_++];
    std::string s;
    while (true) {
      if (p_ >= t_.size() || t_[p_] == '\n') return fail("a string has no closing quote");
      char c = t_[p_++];
      if (c == quote) break;
      if (c == '\\') {
        if (p_ >= t_.size()) return fail("a string ends in a backslash");
        char e = t_[p_++];
        switch (e) {
        case 'n': s += '\n'; break;
        case 't': s += '\t'; break;
        case 'r': s += '\r'; break;
        case '0': s += '\0'; break;
        case 'x': {
          if (p_ + 2 > t_.size() || !isxdigit((unsigned char)t_[p_]) || !isxdigit((unsigned char)t_[p_ + 1])) return fail("a bad \\x escape");
          s += (char)strtol(t_.substr(p_, 2).c_str(), nullptr, 16);
          p_ += 2;
          break;
        }
        default: s += e;
        }
        continue;
      }
      s += c;
    }
    push({T::Str, s, 0, 0, line_});
    return Error::success();
  }
};

using EP = std::unique_ptr<Expr>;

class Parser {
public:
  Parser(std::vector<Token> toks, const std::string& qualifier, const std::string& file) : k_(std::move(toks)), q_(qualifier), file_(file) {}

  Expected<CodeFile> run() {
    CodeFile f;
    while (!at(T::End)) {
      if (at(T::Newline)) { ++i_; continue; }
      if (isName("class")) {
        auto c = classDef();
        if (!c) return c.takeError();
        std::string name = c->name;
        f.classes[name] = std::move(*c);
      } else if (isName("def")) {
        auto d = def();
        if (!d) return d.takeError();
        f.functions[q_ + "." + d->name] = std::move(*d);
      } else if (isName("import") || isName("from")) {
        skipLine();
      } else if (peek().kind == T::Name && peek(1).kind == T::Op && peek(1).s == "=") {
        skipLine(); // a file-level setting (op_version_set = 1)
      } else {
        return fail("expected a class or a function");
      }
    }
    return f;
  }

private:
  std::vector<Token> k_;
  size_t i_ = 0;
  std::string q_, file_;
  int depth_ = 0;

  const Token& peek(size_t n = 0) const { return k_[std::min(i_ + n, k_.size() - 1)]; }
  bool at(T kind) const { return peek().kind == kind; }
  bool isOp(const std::string& s, size_t n = 0) const { return peek(n).kind == T::Op && peek(n).s == s; }
  bool isName(const std::string& s) const { return peek().kind == T::Name && peek().s == s; }
  Error fail(const std::string& m) const {
    const Token& t = peek();
    std::string near = t.kind == T::Newline ? "end of line" : t.kind == T::End ? "end of file" : t.kind == T::Indent ? "indent" : t.kind == T::Dedent ? "dedent" : "'" + t.s + "'";
    return makeError(file_ + ":" + std::to_string(t.line) + ": " + m + " (at " + near + ")");
  }
  Error expectOp(const std::string& s) {
    if (!isOp(s)) return fail("expected '" + s + "'");
    ++i_;
    return Error::success();
  }
  Expected<std::string> name() {
    if (!at(T::Name)) return fail("expected a name");
    return k_[i_++].s;
  }
  void skipLine() {
    int depth = 0;
    while (!at(T::End) && !(at(T::Newline) && depth == 0)) {
      if (at(T::Indent)) ++depth;
      if (at(T::Dedent)) --depth;
      ++i_;
    }
    if (at(T::Newline)) ++i_;
  }
  /// A type annotation's text, up to (not including) one of the stop operators at bracket depth 0.
  std::string typeText(std::initializer_list<const char*> stops) {
    std::string s;
    int depth = 0;
    while (!at(T::End) && !at(T::Newline)) {
      if (depth == 0 && peek().kind == T::Op)
        for (const char* st : stops)
          if (peek().s == st) return s;
      if (isOp("[") || isOp("(")) ++depth;
      if (isOp("]") || isOp(")")) --depth;
      s += k_[i_++].s;
    }
    return s;
  }

  Expected<ClassDef> classDef() {
    ClassDef c;
    c.line = peek().line;
    c.file = file_;
    ++i_;
    auto n = name();
    if (!n) return n.takeError();
    c.name = q_ + "." + *n;
    if (isOp("(")) {
      while (!at(T::End) && !isOp(")")) ++i_;
      if (Error e = expectOp(")")) return e;
    }
    if (Error e = expectOp(":")) return e;
    if (!at(T::Newline)) return fail("expected a new line after the class header");
    ++i_;
    if (!at(T::Indent)) return fail("expected the class body");
    ++i_;
    while (!at(T::Dedent) && !at(T::End)) {
      if (at(T::Newline)) { ++i_; continue; }
      if (isName("def")) {
        auto d = def();
        if (!d) return d.takeError();
        std::string dn = d->name;
        c.methods[dn] = std::move(*d);
        continue;
      }
      if (isName("__parameters__") || isName("__buffers__")) {
        bool params = isName("__parameters__");
        ++i_;
        if (Error e = expectOp("=")) return e;
        auto list = expr();
        if (!list) return list.takeError();
        if ((*list)->kind != Expr::Kind::List) return fail("__parameters__ and __buffers__ are lists of names");
        for (auto& item : (*list)->args) {
          if (item->kind != Expr::Kind::Str) return fail("__parameters__ and __buffers__ are lists of names");
          (params ? c.parameters : c.buffers).push_back(item->s);
        }
        continue;
      }
      skipLine(); // attribute annotations, __annotations__[...] = T, constants
    }
    if (at(T::Dedent)) ++i_;
    return c;
  }

  Expected<Def> def() {
    Def d;
    d.line = peek().line;
    ++i_;
    auto n = name();
    if (!n) return n.takeError();
    d.name = *n;
    if (Error e = expectOp("(")) return e;
    while (!isOp(")")) {
      auto p = name();
      if (!p) return p.takeError();
      d.params.push_back(*p);
      std::string type;
      if (isOp(":")) {
        ++i_;
        type = typeText({",", ")", "="});
      }
      d.types.push_back(type);
      d.defaults.emplace_back();
      if (isOp("=")) {
        ++i_;
        auto v = expr();
        if (!v) return v.takeError();
        d.defaults.back() = std::move(*v);
      }
      if (isOp(",")) ++i_;
      else if (!isOp(")")) return fail("expected ',' or ')' in the parameter list");
    }
    ++i_;
    if (isOp("->")) {
      ++i_;
      typeText({":"});
    }
    if (Error e = expectOp(":")) return e;
    auto body = block();
    if (!body) return body.takeError();
    d.body = std::move(*body);
    return d;
  }

  Expected<std::vector<Stmt>> block() {
    if (!at(T::Newline)) return fail("expected a new line before a block");
    ++i_;
    if (!at(T::Indent)) return fail("expected an indented block");
    ++i_;
    if (++depth_ > kMaxDepth) return fail("blocks nest deeper than " + std::to_string(kMaxDepth));
    std::vector<Stmt> out;
    while (!at(T::Dedent) && !at(T::End)) {
      if (at(T::Newline)) { ++i_; continue; }
      auto s = stmt();
      if (!s) return s.takeError();
      s->end = peek().pos;
      out.push_back(std::move(*s));
    }
    if (at(T::Dedent)) ++i_;
    --depth_;
    return out;
  }

  Error endOfLine() {
    if (!at(T::Newline)) return fail("expected the end of the statement");
    ++i_;
    return Error::success();
  }

  Expected<Stmt> stmt() {
    Stmt s;
    s.line = peek().line;
    s.pos = peek().pos;
    if (isName("pass")) {
      ++i_;
      s.kind = Stmt::Kind::Pass;
      if (Error e = endOfLine()) return e;
      return s;
    }
    if (isName("return")) {
      ++i_;
      s.kind = Stmt::Kind::Return;
      auto v = exprList();
      if (!v) return v.takeError();
      s.value = std::move(*v);
      if (Error e = endOfLine()) return e;
      return s;
    }
    if (isName("if") || isName("elif")) {
      ++i_;
      s.kind = Stmt::Kind::If;
      auto c = expr();
      if (!c) return c.takeError();
      s.value = std::move(*c);
      if (Error e = expectOp(":")) return e;
      auto then = block();
      if (!then) return then.takeError();
      s.then = std::move(*then);
      if (isName("elif")) {
        auto inner = stmt();
        if (!inner) return inner.takeError();
        s.orelse.push_back(std::move(*inner));
      } else if (isName("else")) {
        ++i_;
        if (Error e = expectOp(":")) return e;
        auto other = block();
        if (!other) return other.takeError();
        s.orelse = std::move(*other);
      }
      return s;
    }
    if (isName("for")) {
      ++i_;
      s.kind = Stmt::Kind::For;
      while (at(T::Name) && !isName("in")) {
        s.targets.push_back(k_[i_++].s);
        if (isOp(",")) ++i_;
      }
      if (s.targets.empty() || !isName("in")) return fail("expected 'for NAME in ...'");
      ++i_;
      auto it = expr();
      if (!it) return it.takeError();
      s.value = std::move(*it);
      if (Error e = expectOp(":")) return e;
      auto body = block();
      if (!body) return body.takeError();
      s.then = std::move(*body);
      return s;
    }
    for (const char* kw : {"while", "with", "raise", "assert", "try", "del", "global", "break", "continue"})
      if (isName(kw)) return fail(std::string("'") + kw + "' statements are not supported: straight-line code, constant 'if's and 'for' loops over known ranges are imported");
    // name[, name...] = value, or an expression.
    size_t save = i_;
    std::vector<std::string> targets;
    while (at(T::Name) && (isOp(",", 1) || isOp("=", 1))) {
      targets.push_back(k_[i_++].s);
      if (isOp("=")) break;
      ++i_; // ','
      if (isOp("=")) break;
    }
    if (!targets.empty() && isOp("=")) {
      ++i_;
      s.kind = Stmt::Kind::Assign;
      s.targets = std::move(targets);
      auto v = exprList();
      if (!v) return v.takeError();
      s.value = std::move(*v);
      if (Error e = endOfLine()) return e;
      return s;
    }
    i_ = save;
    s.kind = Stmt::Kind::Expr;
    auto v = expr();
    if (!v) return v.takeError();
    if (isOp("=")) return fail("only names can be assigned to");
    s.value = std::move(*v);
    if (Error e = endOfLine()) return e;
    return s;
  }

  EP node(Expr::Kind k, int line, std::string s = "") {
    auto e = std::make_unique<Expr>();
    e->kind = k, e->line = line, e->s = std::move(s);
    return e;
  }

  /// expr[, expr ...]: several make a tuple.
  Expected<EP> exprList() {
    int line = peek().line;
    auto first = expr();
    if (!first) return first.takeError();
    if (!isOp(",")) return first;
    EP t = node(Expr::Kind::Tuple, line);
    t->args.push_back(std::move(*first));
    while (isOp(",")) {
      ++i_;
      if (at(T::Newline)) break;
      auto e = expr();
      if (!e) return e.takeError();
      t->args.push_back(std::move(*e));
    }
    return t;
  }

  Expected<EP> expr() {
    if (++depth_ > kMaxDepth) return fail("expressions nest deeper than " + std::to_string(kMaxDepth));
    auto e = orExpr();
    --depth_;
    return e;
  }

  Expected<EP> binary(EP lhs, const std::string& op, Expected<EP> rhs, int line) {
    if (!rhs) return rhs.takeError();
    EP b = node(Expr::Kind::Binary, line, op);
    b->args.push_back(std::move(lhs));
    b->args.push_back(std::move(*rhs));
    return b;
  }

  /// One precedence level of left-associative operators: `opAt` names the one at the cursor ("": none).
  template <typename OpAt>
  Expected<EP> leftAssoc(Expected<EP> (Parser::*next)(), OpAt opAt) {
    auto l = (this->*next)();
    while (l) {
      std::string op = opAt();
      if (op.empty()) break;
      int line = peek().line;
      i_ += op == "is not" ? 2 : 1;
      l = binary(std::move(*l), op, (this->*next)(), line);
    }
    return l;
  }
  std::string opIn(std::initializer_list<const char*> ops) const {
    for (const char* o : ops)
      if (isOp(o)) return o;
    return "";
  }

  Expected<EP> orExpr() { return leftAssoc(&Parser::andExpr, [&] { return std::string(isName("or") ? "or" : ""); }); }
  Expected<EP> andExpr() { return leftAssoc(&Parser::notExpr, [&] { return std::string(isName("and") ? "and" : ""); }); }
  Expected<EP> notExpr() {
    if (!isName("not")) return comparison();
    int line = peek().line;
    ++i_;
    if (++depth_ > kMaxDepth) return fail("expressions nest deeper than " + std::to_string(kMaxDepth));
    auto v = notExpr();
    --depth_;
    if (!v) return v.takeError();
    EP u = node(Expr::Kind::Unary, line, "not");
    u->args.push_back(std::move(*v));
    return u;
  }
  Expected<EP> comparison() {
    return leftAssoc(&Parser::arith, [&] {
      if (isName("is")) return std::string(peek(1).kind == T::Name && peek(1).s == "not" ? "is not" : "is");
      return opIn({"==", "!=", "<=", ">=", "<", ">"});
    });
  }
  Expected<EP> arith() { return leftAssoc(&Parser::term, [&] { return opIn({"+", "-"}); }); }
  Expected<EP> term() { return leftAssoc(&Parser::factor, [&] { return opIn({"*", "//", "/", "%"}); }); }
  Expected<EP> factor() {
    if (isOp("-")) {
      int line = peek().line;
      ++i_;
      if (++depth_ > kMaxDepth) return fail("expressions nest deeper than " + std::to_string(kMaxDepth));
      auto v = factor();
      --depth_;
      if (!v) return v.takeError();
      EP u = node(Expr::Kind::Unary, line, "-");
      u->args.push_back(std::move(*v));
      return u;
    }
    auto l = postfix();
    if (l && isOp("**")) {
      int line = peek().line;
      ++i_;
      return binary(std::move(*l), "**", factor(), line);
    }
    return l;
  }

  Expected<EP> postfix() {
    auto e = atom();
    if (!e) return e.takeError();
    EP cur = std::move(*e);
    while (true) {
      int line = peek().line;
      if (isOp(".")) {
        ++i_;
        auto n = name();
        if (!n) return n.takeError();
        EP a = node(Expr::Kind::Attr, line, *n);
        a->args.push_back(std::move(cur));
        cur = std::move(a);
      } else if (isOp("(")) {
        ++i_;
        EP c = node(Expr::Kind::Call, line);
        c->args.push_back(std::move(cur));
        while (!isOp(")")) {
          if (at(T::Name) && isOp("=", 1)) {
            std::string key = k_[i_].s;
            i_ += 2;
            auto v = expr();
            if (!v) return v.takeError();
            c->kwargs.push_back({key, std::move(*v)});
          } else {
            if (!c->kwargs.empty()) return fail("a positional argument after keyword arguments");
            auto v = expr();
            if (!v) return v.takeError();
            c->args.push_back(std::move(*v));
          }
          if (isOp(",")) ++i_;
          else if (!isOp(")")) return fail("expected ',' or ')' in a call");
        }
        ++i_;
        cur = std::move(c);
      } else if (isOp("[")) {
        ++i_;
        auto idx = exprList();
        if (!idx) return idx.takeError();
        if (Error err = expectOp("]")) return err;
        EP s = node(Expr::Kind::Subscript, line);
        s->args.push_back(std::move(cur));
        s->args.push_back(std::move(*idx));
        cur = std::move(s);
      } else {
        return cur;
      }
    }
  }

  Expected<EP> atom() {
    const Token& t = peek();
    int line = t.line;
    switch (t.kind) {
    case T::Name: ++i_; return node(Expr::Kind::Name, line, t.s);
    case T::Str: {
      ++i_;
      std::string s = t.s;
      while (at(T::Str)) s += k_[i_++].s; // adjacent literals concatenate
      return node(Expr::Kind::Str, line, s);
    }
    case T::Int: {
      ++i_;
      EP e = node(Expr::Kind::Int, line, t.s);
      e->u = t.u;
      return e;
    }
    case T::Float: {
      ++i_;
      EP e = node(Expr::Kind::Float, line, t.s);
      e->f = t.f;
      return e;
    }
    case T::Op:
      if (t.s == "(" || t.s == "[") {
        bool list = t.s == "[";
        std::string close = list ? "]" : ")";
        ++i_;
        EP c = node(list ? Expr::Kind::List : Expr::Kind::Tuple, line);
        bool comma = false;
        while (!isOp(close)) {
          auto v = expr();
          if (!v) return v.takeError();
          c->args.push_back(std::move(*v));
          if (isOp(",")) ++i_, comma = true;
          else if (!isOp(close)) return fail("expected ',' or '" + close + "'");
        }
        ++i_;
        if (!list && c->args.size() == 1 && !comma) return std::move(c->args[0]); // parentheses
        return c;
      }
      break;
    default: break;
    }
    return fail("expected an expression");
  }
};

} // namespace

Expected<CodeFile> parseCode(const std::string& text, const std::string& qualifier, const std::string& file) {
  auto toks = Lexer(text, file).run();
  if (!toks) return toks.takeError();
  return Parser(std::move(*toks), qualifier, file).run();
}

} // namespace sgc::ts_import
