// The model's own source lines, from the .debug_pkl beside each code file:
// ("FORMAT_WITH_STRING_TABLE", strings, records), each record (byte offset in
// the code, ((text's string indices, file's index, first line), start, end),
// debug handle). A scripted function's text is its Python source; a traced
// one's is the stack the tracer recorded, innermost frame first.
#include "frontend/torchscript/Internal.h"

namespace sgc::ts_import {
namespace {

/// "path(123): name" -> ("path", 123, "name").
bool frame(const std::string& l, std::string& path, int64_t& line, std::string& fn) {
  size_t open = l.rfind("): "), paren = open == std::string::npos ? open : l.rfind('(', open);
  if (paren == std::string::npos || paren == 0) return false;
  char* end = nullptr;
  line = strtoll(l.c_str() + paren + 1, &end, 10);
  if (end != l.c_str() + open) return false;
  path = l.substr(0, paren), fn = l.substr(open + 3);
  return true;
}

/// A path as a reader recognizes it: from its package (after site-packages/) on.
std::string shortPath(const std::string& p) {
  size_t at = p.rfind("site-packages/");
  return at == std::string::npos ? p : p.substr(at + 14);
}

/// Whether a frame is torch's own (the module call machinery, functional, the tracer).
bool insideTorch(const std::string& path) {
  if (shortPath(path).rfind("torch/", 0) == 0) return true;
  for (const char* dir : {"/torch/nn/", "/torch/jit/", "/torch/_", "/torch/autograd/"})
    if (path.find(dir) != std::string::npos) return true;
  return false;
}

const PyObj* item(Py t, size_t i, PyObj::Kind k) {
  if (!t || (t->kind != PyObj::Kind::Tuple && t->kind != PyObj::Kind::List) || i >= t->items.size()) return nullptr;
  return t->items[i]->kind == k ? t->items[i] : nullptr;
}

} // namespace

std::string Ctx::sourceAt(const std::string& entry, size_t pos, size_t end) {
  if (!archive.has(entry + ".debug_pkl")) return "";
  auto bytes = archive.read(entry + ".debug_pkl");
  if (!bytes) return consumeError(bytes.takeError()), "";
  auto p = unpickle(*bytes, entry + ".debug_pkl");
  if (!p) return consumeError(p.takeError()), "";
  Py root = (*p)->root;
  const PyObj *strings = item(root, 1, PyObj::Kind::Tuple), *records = item(root, 2, PyObj::Kind::Tuple);
  if (!strings || !records) return "";
  auto str = [&](int64_t i) -> std::string {
    return i >= 0 && (size_t)i < strings->items.size() && strings->items[i]->kind == PyObj::Kind::Str ? strings->items[i]->s : "";
  };
  // The statement's first record with a text, else the last one before it (records are in
  // the order of their offsets).
  std::string text, file;
  int64_t first = 0, start = 0;
  for (Py r : records->items) {
    const PyObj *off = item(r, 0, PyObj::Kind::Int), *range = item(r, 1, PyObj::Kind::Tuple);
    if (!off || !range || off->i < 0) continue;
    if ((size_t)off->i >= std::max(end, pos + 1)) break;
    const PyObj *src = item(range, 0, PyObj::Kind::Tuple), *s = item(range, 1, PyObj::Kind::Int);
    const PyObj *parts = item(src, 0, PyObj::Kind::List), *fi = item(src, 1, PyObj::Kind::Int), *line = item(src, 2, PyObj::Kind::Int);
    if (!parts || !fi || !line || !s || parts->items.empty()) continue;
    text.clear();
    for (Py i : parts->items) text += i->kind == PyObj::Kind::Int ? str(i->i) : "";
    file = str(fi->i), first = line->i, start = s->i;
    if ((size_t)off->i >= pos) break;
  }
  if (text.empty() || start < 0 || (size_t)start > text.size()) return "";
  // A traced record's text is the stack: the model's frame is the innermost outside torch.
  std::string path, fn;
  int64_t line = 0;
  size_t at = (size_t)start;
  while (at < text.size()) {
    size_t nl = text.find('\n', at);
    std::string l = text.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    if (!frame(l, path, line, fn)) break;
    if (!insideTorch(path)) return shortPath(path) + ":" + std::to_string(line) + ", in " + fn;
    if (nl == std::string::npos) break;
    at = nl + 1;
  }
  if (frame(text.substr(start, text.find('\n', start) - start), path, line, fn)) return ""; // only torch's own frames
  // A scripted record's text is the function's source, from line `first` of `file`.
  int64_t n = first;
  for (int64_t i = 0; i < start; ++i) n += text[i] == '\n';
  return file.empty() ? "" : shortPath(file) + ":" + std::to_string(n);
}

} // namespace sgc::ts_import
