// Prints a Graph in the text form described in Text.h.
#include "ir/Text.h"

#include <cmath>
#include <cstdio>

namespace sgc::ir {
namespace {

bool isPlainIdent(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!(isalnum((unsigned char)c) || c == '_' || c == '.' || c == '$' || c == '-')) return false;
  return true;
}

std::string quote(const std::string& s) {
  std::string r = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      r += '\\';
      r += (char)c;
    } else if (c < 0x20 || c >= 0x7f) {
      char buf[8];
      snprintf(buf, sizeof buf, "\\%02x", c);
      r += buf;
    } else {
      r += (char)c;
    }
  }
  return r + "\"";
}

std::string name(char sigil, const std::string& n) { return sigil + (isPlainIdent(n) ? n : quote(n)); }
std::string valueRef(const Value* v) { return v ? name('%', v->name) : "_"; }

std::string formatFloat(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[40];
  snprintf(buf, sizeof buf, "%.17g", d);
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string hexData(const Tensor& t) {
  static const char* digits = "0123456789abcdef";
  std::string s = "\"0x";
  s.reserve(t.bytes.size() * 2 + 4);
  for (uint8_t b : t.bytes) {
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s + "\"";
}

std::string dense(const Tensor& t, bool withType, const PrintOptions& o) {
  std::string s = "dense<";
  if (withType) s += toString(Type::of(t.dtype, t.shape)) + ", ";
  s += t.bytes.size() > o.elideDataAbove ? "elided" : hexData(t);
  return s + ">";
}

std::string attrText(const Attr& a, const PrintOptions& o) {
  if (auto* i = std::get_if<int64_t>(&a)) return std::to_string(*i);
  if (auto* f = std::get_if<double>(&a)) return formatFloat(*f);
  if (auto* s = std::get_if<std::string>(&a)) return quote(*s);
  if (auto* t = std::get_if<Tensor>(&a)) return dense(*t, true, o);
  std::string r;
  if (auto* is = std::get_if<std::vector<int64_t>>(&a)) {
    for (size_t i = 0; i < is->size(); ++i) r += (i ? ", " : "") + std::to_string((*is)[i]);
    return "[" + r + "]";
  }
  auto& fs = std::get<std::vector<double>>(a);
  for (size_t i = 0; i < fs.size(); ++i) r += (i ? ", " : "") + formatFloat(fs[i]);
  return (fs.empty() ? "floats[" : "[") + r + "]";
}

std::string nodeText(const Node& n, const PrintOptions& o) {
  std::string s = "  ";
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    const Value* v = n.outputs[i];
    s += (i ? ", " : "") + valueRef(v) + (v ? " : " + toString(v->type) : "");
  }
  s += " = " + std::string(opName(n.op)) + "(";
  for (size_t i = 0; i < n.inputs.size(); ++i) s += (i ? ", " : "") + valueRef(n.inputs[i]);
  s += ")";
  if (!n.attrs.empty()) {
    s += " {";
    bool first = true;
    for (auto& [k, a] : n.attrs) {
      s += (first ? "" : ", ") + (isPlainIdent(k) ? k : quote(k)) + " = " + attrText(a, o);
      first = false;
    }
    s += "}";
  }
  if (!n.name.empty()) s += " loc(" + quote(n.name) + ")";
  return s + "\n";
}

} // namespace

std::string print(const Graph& g, const PrintOptions& o) {
  std::string s = "graph " + name('@', g.name) + " {\n";
  for (const Value* v : g.inputs) s += "  input " + valueRef(v) + " : " + toString(v->type) + "\n";
  for (const Value* v : g.params)
    s += "  param " + valueRef(v) + " : " + toString(v->type) + " = " + dense(*v->data, false, o) + "\n";
  for (const Value* v : g.state)
    s += "  state " + valueRef(v) + " : " + toString(v->type) + " = " + dense(*v->data, false, o) + "\n";
  for (const Value* v : g.consts)
    s += "  const " + valueRef(v) + " : " + toString(v->type) + " = " + dense(*v->data, false, o) + "\n";
  for (const auto& n : g.nodes()) s += nodeText(*n, o);
  if (!g.outputs.empty()) {
    s += "  output ";
    for (size_t i = 0; i < g.outputs.size(); ++i) s += (i ? ", " : "") + valueRef(g.outputs[i]);
    s += "\n";
  }
  for (auto& [v, next] : g.updates) s += "  update " + valueRef(v) + " = " + valueRef(next) + "\n";
  for (auto& [v, why] : g.untrainable) s += "  untrainable " + name('%', v) + " " + quote(why) + "\n";
  if (!g.notTrainable.empty()) s += "  untrainable " + quote(g.notTrainable) + "\n";
  return s + "}\n";
}

} // namespace sgc::ir
