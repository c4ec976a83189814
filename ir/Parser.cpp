// Parses the text form described in Text.h back into a Graph. Errors name
// the file, line and column and what was expected.
#include "ir/Text.h"

#include <cmath>
#include <cstdlib>

namespace sgc::ir {
namespace {

enum class Tok { End, Ident, Local, Global, Number, String, Punct };

struct Token {
  Tok kind = Tok::End;
  std::string text; ///< identifier/name/number text, decoded string, or the punctuation
  int line = 1, col = 1;
};

bool identChar(char c) { return isalnum((unsigned char)c) || c == '_' || c == '.' || c == '$' || c == '-'; }

class Lexer {
public:
  Lexer(std::string_view s) : s_(s) {}

  Expected<Token> next() {
    skipSpace();
    Token t;
    t.line = line_;
    t.col = col_;
    if (i_ >= s_.size()) return t;
    char c = s_[i_];
    if (c == '%' || c == '@') {
      advance();
      t.kind = c == '%' ? Tok::Local : Tok::Global;
      if (i_ < s_.size() && s_[i_] == '"') return quoted(t);
      t.text = identifier();
      if (t.text.empty()) return fail(t, "a name after '" + std::string(1, c) + "'");
      return t;
    }
    if (c == '"') {
      t.kind = Tok::String;
      return quoted(t);
    }
    if (isdigit((unsigned char)c) || ((c == '-' || c == '+') && i_ + 1 < s_.size() && (isdigit((unsigned char)s_[i_ + 1]) || s_[i_ + 1] == 'i'))) {
      t.kind = Tok::Number;
      t.text = identifier(); // numbers use a subset of identifier characters plus '+'
      while (i_ < s_.size() && (s_[i_] == '+' || identChar(s_[i_]))) t.text += advance();
      return t;
    }
    if (isalpha((unsigned char)c) || c == '_' || c == '?') {
      t.kind = Tok::Ident;
      t.text = c == '?' ? std::string(1, advance()) : identifier();
      return t;
    }
    if (std::string_view("(){}[]<>,=:*").find(c) != std::string_view::npos) {
      t.kind = Tok::Punct;
      t.text = std::string(1, advance());
      return t;
    }
    return fail(t, "a token, found '" + std::string(1, c) + "'");
  }

  std::string where(const Token& t) const { return std::to_string(t.line) + ":" + std::to_string(t.col); }

private:
  Error fail(const Token& t, const std::string& what) { return makeError(where(t) + ": expected " + what); }

  char advance() {
    char c = s_[i_++];
    if (c == '\n') {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
    return c;
  }

  void skipSpace() {
    while (i_ < s_.size()) {
      if (isspace((unsigned char)s_[i_])) {
        advance();
      } else if (s_[i_] == '/' && i_ + 1 < s_.size() && s_[i_ + 1] == '/') {
        while (i_ < s_.size() && s_[i_] != '\n') advance();
      } else {
        break;
      }
    }
  }

  std::string identifier() {
    std::string r;
    while (i_ < s_.size() && identChar(s_[i_])) r += advance();
    return r;
  }

  Expected<Token> quoted(Token t) {
    advance(); // opening quote
    while (i_ < s_.size() && s_[i_] != '"') {
      char c = advance();
      if (c != '\\') {
        t.text += c;
        continue;
      }
      if (i_ >= s_.size()) break;
      if (s_[i_] == '"' || s_[i_] == '\\') {
        t.text += advance();
        continue;
      }
      if (i_ + 1 >= s_.size() || !isxdigit((unsigned char)s_[i_]) || !isxdigit((unsigned char)s_[i_ + 1]))
        return fail(t, "two hex digits after '\\' in a string");
      std::string hex{advance(), advance()};
      t.text += (char)std::stoi(hex, nullptr, 16);
    }
    if (i_ >= s_.size()) return fail(t, "a closing '\"'");
    advance();
    return t;
  }

  std::string_view s_;
  size_t i_ = 0;
  int line_ = 1, col_ = 1;
};

class Parser {
public:
  Parser(std::string_view text, const std::string& file, const ParseOptions& o) : lex_(text), file_(file), opts_(o) {}

  Expected<std::unique_ptr<Graph>> run() {
    if (Error e = advance()) return e;
    if (Error e = expectIdent("graph")) return e;
    if (tok_.kind != Tok::Global) return fail("a graph name like @main");
    g_->name = tok_.text;
    if (Error e = advance()) return e;
    if (Error e = expectPunct("{")) return e;
    while (!isPunct("}")) {
      if (tok_.kind == Tok::End) return fail("'}' closing the graph");
      if (Error e = statement()) return e;
    }
    if (Error e = advance()) return e;
    if (tok_.kind != Tok::End) return fail("the end of the text after the graph");
    return std::move(g_);
  }

private:
  Error fail(const std::string& what) {
    std::string found = tok_.kind == Tok::End ? "end of text" : "'" + tok_.text + "'";
    return makeError(file_ + ":" + lex_.where(tok_) + ": expected " + what + ", found " + found);
  }
  Error advance() {
    auto t = lex_.next();
    if (!t) return makeError(file_ + ":" + errorText(t.takeError()));
    tok_ = *t;
    return Error::success();
  }
  bool isPunct(const char* p) const { return tok_.kind == Tok::Punct && tok_.text == p; }
  bool isIdent(const char* p) const { return tok_.kind == Tok::Ident && tok_.text == p; }
  Error expectPunct(const char* p) { return isPunct(p) ? advance() : fail(std::string("'") + p + "'"); }
  Error expectIdent(const char* p) { return isIdent(p) ? advance() : fail(std::string("'") + p + "'"); }

  Error statement() {
    if (isIdent("input") || isIdent("param") || isIdent("state") || isIdent("const")) return declaration();
    if (isIdent("output")) return outputs();
    if (isIdent("update")) return update();
    if (isIdent("untrainable")) return untrainable();
    if (tok_.kind == Tok::Local || isIdent("_")) return node();
    return fail("'input', 'param', 'state', 'const', 'output', 'update' or a node");
  }

  Expected<std::string> newName() {
    if (tok_.kind != Tok::Local) return fail("a value name like %x");
    std::string n = tok_.text;
    if (g_->findValue(n)) return fail("a name not defined before (%" + n + " is)");
    if (Error e = advance()) return e;
    return n;
  }

  Error declaration() {
    std::string kind = tok_.text;
    if (Error e = advance()) return e;
    auto n = newName();
    if (!n) return n.takeError();
    if (Error e = expectPunct(":")) return e;
    auto t = type();
    if (!t) return t.takeError();
    if (kind == "input") {
      g_->addInput(*n, *t);
      return Error::success();
    }
    if (!t->isStatic() || !t->staticNumel()) return fail("a static shape for a " + kind);
    if (Error e = expectPunct("=")) return e;
    auto data = dense(&*t);
    if (!data) return data.takeError();
    if (kind == "param") g_->addParam(*n, std::move(*data));
    else if (kind == "state") g_->addState(*n, std::move(*data));
    else g_->addConst(*n, std::move(*data));
    return Error::success();
  }

  Error outputs() {
    if (Error e = advance()) return e;
    while (true) {
      auto v = valueRef(false);
      if (!v) return v.takeError();
      g_->outputs.push_back(*v);
      if (!isPunct(",")) return Error::success();
      if (Error e = advance()) return e;
    }
  }

  Error update() {
    if (Error e = advance()) return e;
    auto target = valueRef(false);
    if (!target) return target.takeError();
    if (Error e = expectPunct("=")) return e;
    auto next = valueRef(false);
    if (!next) return next.takeError();
    g_->updates.push_back({*target, *next});
    return Error::success();
  }

  Error untrainable() {
    if (Error e = advance()) return e;
    if (tok_.kind == Tok::String) { // the graph as a whole
      g_->notTrainable = tok_.text;
      return advance();
    }
    if (tok_.kind != Tok::Local) return fail("a value name like %x, or a quoted reason");
    std::string v = tok_.text;
    if (Error e = advance()) return e;
    if (tok_.kind != Tok::String) return fail("a quoted reason");
    g_->untrainable[v] = tok_.text;
    return advance();
  }

  Expected<Value*> valueRef(bool allowAbsent) {
    if (allowAbsent && isIdent("_")) {
      if (Error e = advance()) return e;
      return nullptr;
    }
    if (tok_.kind != Tok::Local) return fail(allowAbsent ? "a value like %x or '_'" : "a value like %x");
    Value* v = g_->findValue(tok_.text);
    if (!v) return fail("a value defined earlier");
    if (Error e = advance()) return e;
    return v;
  }

  Error node() {
    std::vector<std::pair<std::string, Type>> results; // empty name: unused result
    while (true) {
      if (isIdent("_")) {
        if (Error e = advance()) return e;
        results.push_back({"", Type{}});
      } else {
        auto n = newName();
        if (!n) return n.takeError();
        if (Error e = expectPunct(":")) return e;
        auto t = type();
        if (!t) return t.takeError();
        results.push_back({*n, *t});
      }
      if (!isPunct(",")) break;
      if (Error e = advance()) return e;
    }
    if (Error e = expectPunct("=")) return e;
    if (tok_.kind != Tok::Ident) return fail("an op name");
    auto op = opFromName(tok_.text);
    if (!op) return fail("a known op name");
    if (Error e = advance()) return e;
    if (Error e = expectPunct("(")) return e;
    std::vector<Value*> ins;
    while (!isPunct(")")) {
      if (!ins.empty())
        if (Error e = expectPunct(",")) return e;
      auto v = valueRef(true);
      if (!v) return v.takeError();
      ins.push_back(*v);
    }
    if (Error e = advance()) return e;
    std::vector<std::string> names;
    for (auto& r : results) names.push_back(r.first.empty() ? g_->uniqueName("unused") : r.first);
    Node* n = g_->addNode(*op, ins, (int)results.size(), "", names);
    for (size_t i = 0; i < results.size(); ++i) n->outputs[i]->type = results[i].second;
    if (isPunct("{"))
      if (Error e = attributes(*n)) return e;
    if (isIdent("loc")) {
      if (Error e = advance()) return e;
      if (Error e = expectPunct("(")) return e;
      if (tok_.kind != Tok::String) return fail("a quoted node name");
      n->name = tok_.text;
      if (Error e = advance()) return e;
      if (Error e = expectPunct(")")) return e;
    }
    for (size_t i = 0; i < results.size(); ++i)
      if (results[i].first.empty()) n->outputs[i] = nullptr;
    return Error::success();
  }

  Error attributes(Node& n) {
    if (Error e = advance()) return e;
    while (!isPunct("}")) {
      if (!n.attrs.empty())
        if (Error e = expectPunct(",")) return e;
      if (tok_.kind != Tok::Ident && tok_.kind != Tok::String) return fail("an attribute name");
      std::string key = tok_.text;
      if (n.attrs.count(key)) return fail("attribute '" + key + "' only once");
      if (Error e = advance()) return e;
      if (Error e = expectPunct("=")) return e;
      auto a = attrValue();
      if (!a) return a.takeError();
      n.attrs[key] = std::move(*a);
    }
    return advance();
  }

  Expected<double> number(bool* isFloat) {
    if (tok_.kind != Tok::Number && !isIdent("inf") && !isIdent("nan")) return fail("a number");
    std::string s = tok_.text;
    *isFloat = s.find_first_of(".eEni") != std::string::npos;
    errno = 0;
    char* end = nullptr;
    double d = *isFloat ? std::strtod(s.c_str(), &end) : (double)std::strtoll(s.c_str(), &end, 10);
    if (end != s.c_str() + s.size() || (!*isFloat && errno == ERANGE)) return fail("a valid number");
    return d;
  }

  Expected<Attr> attrValue() {
    if (tok_.kind == Tok::String) {
      std::string s = tok_.text;
      if (Error e = advance()) return e;
      return Attr(s);
    }
    if (isIdent("dense")) {
      auto t = dense(nullptr);
      if (!t) return t.takeError();
      return Attr(std::move(*t));
    }
    if (isIdent("floats")) {
      if (Error e = advance()) return e;
      if (!isPunct("[")) return fail("'['");
      return list(true);
    }
    if (isPunct("[")) return list(false);
    bool isFloat = false;
    std::string text = tok_.text;
    auto d = number(&isFloat);
    if (!d) return d.takeError();
    if (Error e = advance()) return e;
    if (isFloat) return Attr(*d);
    return Attr((int64_t)std::strtoll(text.c_str(), nullptr, 10));
  }

  Expected<Attr> list(bool floats) {
    if (Error e = advance()) return e;
    std::vector<int64_t> ints;
    std::vector<double> fs;
    while (!isPunct("]")) {
      if (!fs.empty())
        if (Error e = expectPunct(",")) return e;
      bool isFloat = false;
      std::string text = tok_.text;
      auto d = number(&isFloat);
      if (!d) return d.takeError();
      floats |= isFloat;
      fs.push_back(*d);
      ints.push_back(isFloat ? 0 : (int64_t)std::strtoll(text.c_str(), nullptr, 10));
      if (Error e = advance()) return e;
    }
    if (Error e = advance()) return e;
    if (floats) return Attr(fs);
    return Attr(ints);
  }

  /// dense<"0x.."> with `declared` type, or dense<TYPE, "0x.."> when declared is null.
  Expected<Tensor> dense(const Type* declared) {
    if (Error e = expectIdent("dense")) return e;
    if (Error e = expectPunct("<")) return e;
    Type t;
    if (!declared) {
      auto pt = type();
      if (!pt) return pt.takeError();
      t = *pt;
      if (!t.isStatic() || !t.staticNumel()) return fail("a static shape for a tensor");
      if (Error e = expectPunct(",")) return e;
    } else {
      t = *declared;
    }
    Tensor data(t.dtype, t.shape());
    if (isIdent("elided")) {
      if (!opts_.allowElided) return fail("tensor data (this text has it elided)");
    } else {
      if (tok_.kind != Tok::String || tok_.text.rfind("0x", 0) != 0) return fail("hex data like \"0x00ff\"");
      std::string_view hex = std::string_view(tok_.text).substr(2);
      if (hex.size() != data.bytes.size() * 2) return fail(std::to_string(data.bytes.size()) + " bytes of data for " + toString(t));
      for (size_t i = 0; i < data.bytes.size(); ++i) {
        auto nib = [](char c) { return isdigit((unsigned char)c) ? c - '0' : (tolower(c) - 'a' + 10); };
        if (!isxdigit((unsigned char)hex[2 * i]) || !isxdigit((unsigned char)hex[2 * i + 1])) return fail("hex digits");
        data.bytes[i] = (uint8_t)(nib(hex[2 * i]) * 16 + nib(hex[2 * i + 1]));
      }
    }
    if (Error e = advance()) return e;
    if (Error e = expectPunct(">")) return e;
    return data;
  }

  Expected<Type> type() {
    if (tok_.kind != Tok::Ident) return fail("a type like f32[2, 3]");
    Type t;
    if (tok_.text != "?") {
      auto d = dtypeFromName(tok_.text);
      if (!d) return fail("a dtype (f32, i64, ...)");
      t.dtype = *d;
    }
    if (Error e = advance()) return e;
    if (Error e = expectPunct("[")) return e;
    if (isPunct("*")) {
      if (Error e = advance()) return e;
      if (Error e = expectPunct("]")) return e;
      return t;
    }
    t.ranked = true;
    while (!isPunct("]")) {
      if (!t.dims.empty())
        if (Error e = expectPunct(",")) return e;
      if (tok_.kind == Tok::Number) {
        char* end = nullptr;
        errno = 0;
        long long v = std::strtoll(tok_.text.c_str(), &end, 10);
        if (v < 0 || errno == ERANGE || *end) return fail("a non-negative dim");
        t.dims.push_back(Dim::of(v));
      } else if (isIdent("?")) {
        t.dims.push_back(Dim::unknown());
      } else if (tok_.kind == Tok::Ident) {
        t.dims.push_back(Dim::sym(tok_.text));
      } else {
        return fail("a dim (number, symbol or ?)");
      }
      if (Error e = advance()) return e;
    }
    if (Error e = advance()) return e;
    return t;
  }

  Lexer lex_;
  std::string file_;
  ParseOptions opts_;
  Token tok_;
  std::unique_ptr<Graph> g_ = std::make_unique<Graph>();
};

} // namespace

Expected<std::unique_ptr<Graph>> parse(std::string_view text, const std::string& fileName, const ParseOptions& opts) {
  return Parser(text, fileName, opts).run();
}

} // namespace sgc::ir
