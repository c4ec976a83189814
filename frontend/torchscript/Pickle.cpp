// The restricted unpickler (see Pickle.h): a stack machine over the opcodes
// of protocols 2 to 4 that torch's pickler uses; every read is bounds-checked.
#include "frontend/torchscript/Pickle.h"

#include <cstring>
#include <map>

namespace sgc::ts_import {

Py PyObj::attr(const std::string& key) const {
  for (const auto& [k, v] : entries)
    if (k && k->kind == Kind::Str && k->s == key) return v;
  return nullptr;
}

std::string kindName(const PyObj& o) {
  switch (o.kind) {
  case PyObj::Kind::None: return "None";
  case PyObj::Kind::Bool: return "a bool";
  case PyObj::Kind::Int: return "an int";
  case PyObj::Kind::Float: return "a float";
  case PyObj::Kind::Str: return "a string";
  case PyObj::Kind::Tuple: return "a tuple";
  case PyObj::Kind::List: return "a list";
  case PyObj::Kind::Dict: return "a dict";
  case PyObj::Kind::Object: return "an object of " + o.s;
  case PyObj::Kind::Tensor: return "a tensor";
  case PyObj::Kind::Global: return "the global " + o.s;
  case PyObj::Kind::Storage: return "a storage";
  }
  return "a value";
}

namespace {

using Mut = PyObj*;
using K = PyObj::Kind;

constexpr size_t kMaxMemo = 1 << 24;
constexpr size_t kMaxStack = 1 << 24;


/// Callables the archive may name: what REDUCE and NEWOBJ may call.
bool isStorageType(const std::string& g) {
  static const char* types[] = {"FloatStorage", "DoubleStorage", "HalfStorage", "BFloat16Storage", "LongStorage", "IntStorage",
                                "ShortStorage", "CharStorage",   "ByteStorage", "BoolStorage"};
  if (g.rfind("torch.", 0) != 0) return false;
  for (const char* t : types)
    if (g == std::string("torch.") + t) return true;
  return false;
}

bool allowedGlobal(const std::string& g) {
  static const char* fns[] = {"torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_parameter", "collections.OrderedDict",
                              "torch.jit._pickle.restore_type_tag", "torch.jit._pickle.build_intlist", "torch.jit._pickle.build_tensorlist",
                              "torch.jit._pickle.build_doublelist", "torch.jit._pickle.build_boollist"};
  for (const char* f : fns)
    if (g == f) return true;
  return isStorageType(g) || g.rfind("__torch__.", 0) == 0;
}

class Unpickler {
public:
  Unpickler(const std::string& b, const std::string& what, Pickled& out) : b_(b), what_(what), out_(out) {}

  Expected<Py> run() {
    while (true) {
      if (pos_ >= b_.size()) return fail("ends without a STOP opcode");
      size_t at = pos_;
      unsigned char op = (unsigned char)b_[pos_++];
      if (op == '.') {
        if (stack_.size() != 1) return fail("STOP with " + std::to_string(stack_.size()) + " values on the stack, expected 1");
        return Py(stack_.back());
      }
      if (Error e = step(op)) return makeError(what_ + ": at byte " + std::to_string(at) + ": " + errorText(std::move(e)));
    }
  }

private:
  const std::string& b_;
  std::string what_;
  Pickled& out_;
  size_t pos_ = 0;
  std::vector<Mut> stack_;
  std::vector<size_t> marks_;
  std::map<uint64_t, Mut> memo_;

  Mut make(K k) {
    out_.arena.push_back(std::make_unique<PyObj>());
    out_.arena.back()->kind = k;
    return out_.arena.back().get();
  }
  Error fail(const std::string& m) const { return makeError(what_ + ": " + m); }
  static Error err(const std::string& m) { return makeError(m); }

  Expected<uint64_t> uint(int n) {
    if (b_.size() - pos_ < (size_t)n) return err("truncated");
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = v << 8 | (unsigned char)b_[pos_ + i];
    pos_ += n;
    return v;
  }
  Expected<std::string> bytes(uint64_t n) {
    if (b_.size() - pos_ < n) return err("truncated: a string of " + std::to_string(n) + " bytes runs past the end");
    std::string s = b_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  Expected<std::string> line() {
    size_t nl = b_.find('\n', pos_);
    if (nl == std::string::npos) return err("truncated: a GLOBAL name has no end");
    std::string s = b_.substr(pos_, nl - pos_);
    pos_ = nl + 1;
    return s;
  }
  Error push(Mut o) {
    if (stack_.size() >= kMaxStack) return err("the stack grows past " + std::to_string(kMaxStack) + " values");
    stack_.push_back(std::move(o));
    return Error::success();
  }
  Expected<Mut> pop() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back())) return err("pops an empty stack");
    Mut o = stack_.back();
    stack_.pop_back();
    return o;
  }
  /// The values above the last MARK, which is removed.
  Expected<std::vector<Mut>> popMark() {
    if (marks_.empty()) return err("no MARK to pop to");
    size_t m = marks_.back();
    marks_.pop_back();
    std::vector<Mut> v(stack_.begin() + (ptrdiff_t)m, stack_.end());
    stack_.resize(m);
    return v;
  }
  Expected<Mut> top() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back())) return err("reads an empty stack");
    return stack_.back();
  }
  Error put(uint64_t i) {
    auto t = top();
    if (!t) return t.takeError();
    if (memo_.size() >= kMaxMemo && !memo_.count(i)) return err("the memo grows past " + std::to_string(kMaxMemo) + " entries");
    memo_[i] = *t;
    return Error::success();
  }
  Error get(uint64_t i) {
    auto it = memo_.find(i);
    if (it == memo_.end()) return err("reads memo entry " + std::to_string(i) + ", which was never stored");
    return push(it->second);
  }
  Error pushInt(int64_t v) {
    Mut o = make(K::Int);
    o->i = v;
    return push(o);
  }
  Error pushStr(std::string s) {
    Mut o = make(K::Str);
    o->s = std::move(s);
    return push(o);
  }
  Error pushGlobal(const std::string& module, const std::string& name) {
    std::string g = module + "." + name;
    if (!allowedGlobal(g)) return err("asks for the global '" + g + "', which a TorchScript archive never needs (refused: loading runs nothing)");
    Mut o = make(K::Global);
    o->s = g;
    return push(o);
  }
  Error tuple(std::vector<Mut> items) {
    Mut o = make(K::Tuple);
    o->items.assign(items.begin(), items.end());
    return push(o);
  }

  static Expected<int64_t> intOf(Py o, const std::string& what) {
    if (!o || (o->kind != K::Int && o->kind != K::Bool)) return err(what + " is " + (o ? kindName(*o) : "missing") + ", expected an int");
    return o->i;
  }
  static Expected<std::vector<int64_t>> intsOf(Py o, const std::string& what) {
    if (!o || o->kind != K::Tuple) return err(what + " is " + (o ? kindName(*o) : "missing") + ", expected a tuple of ints");
    std::vector<int64_t> v;
    for (const Py& x : o->items) {
      if (x->kind != K::Int) return err(what + " holds " + kindName(*x) + ", expected ints");
      v.push_back(x->i);
    }
    return v;
  }

  /// torch._utils._rebuild_tensor_v2(storage, offset, sizes, strides, requires_grad, hooks[, metadata]).
  Expected<Mut> rebuildTensor(const std::vector<Py>& a) {
    if (a.size() < 5 || a[0]->kind != K::Storage) return err("_rebuild_tensor_v2 takes (storage, offset, sizes, strides, requires_grad, ...)");
    Mut t = make(K::Tensor);
    t->tensor = a[0]->tensor;
    auto off = intOf(a[1], "a tensor's storage offset");
    auto sizes = intsOf(a[2], "a tensor's sizes");
    auto strides = intsOf(a[3], "a tensor's strides");
    if (!off) return off.takeError();
    if (!sizes) return sizes.takeError();
    if (!strides) return strides.takeError();
    if (sizes->size() != strides->size()) return err("a tensor has " + std::to_string(sizes->size()) + " sizes and " + std::to_string(strides->size()) + " strides");
    t->tensor.offset = *off, t->tensor.sizes = *sizes, t->tensor.strides = *strides;
    t->tensor.requiresGrad = a[4]->kind == K::Bool && a[4]->i;
    return t;
  }

  Expected<Mut> call(const Mut& fn, const Mut& args) {
    if (fn->kind != K::Global) return err("REDUCE calls " + kindName(*fn) + ", not a global");
    if (args->kind != K::Tuple) return err("REDUCE's arguments are " + kindName(*args) + ", not a tuple");
    const auto& a = args->items;
    const std::string& g = fn->s;
    if (g == "torch._utils._rebuild_tensor_v2") return rebuildTensor(a);
    if (g == "collections.OrderedDict") return make(K::Dict);
    if (g == "torch._utils._rebuild_parameter" || g == "torch.jit._pickle.restore_type_tag" || g.rfind("torch.jit._pickle.build_", 0) == 0) {
      if (a.empty()) return err(g + " takes at least one argument");
      return const_cast<Mut>(a[0]);
    }
    return err("REDUCE calls " + g + ", which builds nothing an archive holds");
  }

  /// BINPERSID's ('storage', storage type, key, location, numel).
  Expected<Mut> storage(const Mut& pid) {
    if (pid->kind != K::Tuple || pid->items.size() < 5 || pid->items[0]->kind != K::Str || pid->items[0]->s != "storage")
      return err("a persistent id is " + kindName(*pid) + ", expected ('storage', type, key, location, numel)");
    const auto& it = pid->items;
    if (it[1]->kind != K::Global || !isStorageType(it[1]->s)) return err("a storage's type is " + kindName(*it[1]));
    if (it[2]->kind != K::Str) return err("a storage's key is " + kindName(*it[2]) + ", expected a string");
    if (it[4]->kind != K::Int || it[4]->i < 0) return err("a storage's size is not a non-negative int");
    Mut s = make(K::Storage);
    s->tensor.storageType = it[1]->s.substr(6);
    s->tensor.storage = it[2]->s;
    s->tensor.storageNumel = it[4]->i;
    return s;
  }

  Error setItems(std::vector<Mut> kv) {
    auto d = top();
    if (!d) return d.takeError();
    if ((*d)->kind != K::Dict) return err("SETITEMS on " + kindName(**d) + ", not a dict");
    if (kv.size() % 2) return err("SETITEMS with an odd count of keys and values");
    for (size_t i = 0; i < kv.size(); i += 2) (*d)->entries.push_back({kv[i], kv[i + 1]});
    return Error::success();
  }
  Error appends(std::vector<Mut> v) {
    auto l = top();
    if (!l) return l.takeError();
    if ((*l)->kind != K::List) return err("APPENDS on " + kindName(**l) + ", not a list");
    (*l)->items.insert((*l)->items.end(), v.begin(), v.end());
    return Error::success();
  }

  Error step(unsigned char op) {
    switch (op) {
    case 0x80: return uint(1).takeError(); // PROTO
    case 0x95: return uint(8).takeError(); // FRAME
    case 'c': { // GLOBAL
      auto m = line();
      if (!m) return m.takeError();
      auto n = line();
      if (!n) return n.takeError();
      return pushGlobal(*m, *n);
    }
    case 0x93: { // STACK_GLOBAL
      auto n = pop(), m = n ? pop() : Expected<Mut>(Mut(nullptr));
      if (!n) return n.takeError();
      if (!m) return m.takeError();
      if ((*m)->kind != K::Str || (*n)->kind != K::Str) return err("STACK_GLOBAL of a non-string");
      return pushGlobal((*m)->s, (*n)->s);
    }
    case 'q': { auto i = uint(1); if (!i) return i.takeError(); return put(*i); }
    case 'r': { auto i = uint(4); if (!i) return i.takeError(); return put(*i); }
    case 0x94: return put(memo_.size()); // MEMOIZE
    case 'h': { auto i = uint(1); if (!i) return i.takeError(); return get(*i); }
    case 'j': { auto i = uint(4); if (!i) return i.takeError(); return get(*i); }
    case '(':
      marks_.push_back(stack_.size());
      return Error::success();
    case 't': { auto v = popMark(); if (!v) return v.takeError(); return tuple(*v); }
    case ')': return tuple({});
    case 0x85: case 0x86: case 0x87: { // TUPLE1..3
      std::vector<Mut> v(op - 0x84);
      for (size_t i = v.size(); i-- > 0;) {
        auto o = pop();
        if (!o) return o.takeError();
        v[i] = *o;
      }
      return tuple(v);
    }
    case '}': return push(make(K::Dict));
    case ']': return push(make(K::List));
    case 'u': { auto v = popMark(); if (!v) return v.takeError(); return setItems(*v); }
    case 's': {
      auto v = pop(), k = v ? pop() : Expected<Mut>(Mut(nullptr));
      if (!v) return v.takeError();
      if (!k) return k.takeError();
      return setItems({*k, *v});
    }
    case 'e': { auto v = popMark(); if (!v) return v.takeError(); return appends(*v); }
    case 'a': { auto v = pop(); if (!v) return v.takeError(); return appends({*v}); }
    case 'X': { auto n = uint(4); if (!n) return n.takeError(); auto s = bytes(*n); if (!s) return s.takeError(); return pushStr(*s); }
    case 0x8c: { auto n = uint(1); if (!n) return n.takeError(); auto s = bytes(*n); if (!s) return s.takeError(); return pushStr(*s); }
    case 0x8d: { auto n = uint(8); if (!n) return n.takeError(); auto s = bytes(*n); if (!s) return s.takeError(); return pushStr(*s); }
    case 'C': { auto n = uint(1); if (!n) return n.takeError(); auto s = bytes(*n); if (!s) return s.takeError(); return pushStr(*s); }
    case 'B': { auto n = uint(4); if (!n) return n.takeError(); auto s = bytes(*n); if (!s) return s.takeError(); return pushStr(*s); }
    case 'J': { auto v = uint(4); if (!v) return v.takeError(); return pushInt((int32_t)(uint32_t)*v); }
    case 'K': { auto v = uint(1); if (!v) return v.takeError(); return pushInt((int64_t)*v); }
    case 'M': { auto v = uint(2); if (!v) return v.takeError(); return pushInt((int64_t)*v); }
    case 0x8a: { // LONG1: little-endian two's complement of n bytes
      auto n = uint(1);
      if (!n) return n.takeError();
      if (*n > 8) return err("an integer of " + std::to_string(*n) + " bytes does not fit 64 bits");
      if (*n == 0) return pushInt(0);
      auto v = uint((int)*n);
      if (!v) return v.takeError();
      uint64_t x = *v;
      if (*n < 8 && (x >> (8 * *n - 1) & 1)) x |= ~uint64_t(0) << (8 * *n);
      return pushInt((int64_t)x);
    }
    case 'N': return push(make(K::None));
    case 0x88: case 0x89: {
      Mut o = make(K::Bool);
      o->i = op == 0x88;
      return push(o);
    }
    case 'G': { // BINFLOAT: big-endian
      if (b_.size() - pos_ < 8) return err("truncated");
      uint64_t x = 0;
      for (int i = 0; i < 8; ++i) x = x << 8 | (unsigned char)b_[pos_ + i];
      pos_ += 8;
      Mut o = make(K::Float);
      std::memcpy(&o->f, &x, 8);
      return push(o);
    }
    case 'R': case 0x81: { // REDUCE, NEWOBJ
      auto args = pop(), fn = args ? pop() : Expected<Mut>(Mut(nullptr));
      if (!args) return args.takeError();
      if (!fn) return fn.takeError();
      if (op == 0x81) {
        if ((*fn)->kind != K::Global || (*fn)->s.rfind("__torch__.", 0) != 0) return err("NEWOBJ of " + kindName(**fn) + ", not a TorchScript class");
        Mut o = make(K::Object);
        o->s = (*fn)->s;
        return push(o);
      }
      auto r = call(*fn, *args);
      if (!r) return r.takeError();
      return push(*r);
    }
    case 'b': { // BUILD
      auto state = pop();
      if (!state) return state.takeError();
      auto o = top();
      if (!o) return o.takeError();
      if ((*o)->kind != K::Object || (*state)->kind != K::Dict) return err("BUILD of " + kindName(**o) + " from " + kindName(**state));
      (*o)->entries = (*state)->entries;
      return Error::success();
    }
    case 'Q': { // BINPERSID
      auto pid = pop();
      if (!pid) return pid.takeError();
      auto s = storage(*pid);
      if (!s) return s.takeError();
      return push(*s);
    }
    default: {
      char hex[8];
      snprintf(hex, sizeof hex, "0x%02x", op);
      return err(std::string("opcode ") + hex + " is not one a TorchScript archive uses");
    }
    }
  }
};

} // namespace

Expected<std::unique_ptr<Pickled>> unpickle(const std::string& bytes, const std::string& what) {
  auto p = std::make_unique<Pickled>();
  auto root = Unpickler(bytes, what, *p).run();
  if (!root) return root.takeError();
  p->root = *root;
  return p;
}

} // namespace sgc::ts_import
