// Archive-level import (see Importer.h): the pickled module tree, its
// tensors, the code of its classes, the forward's inputs; then the forward
// is evaluated into the graph.
#include "frontend/torchscript/Internal.h"

#include "ir/Verifier.h"
#include "ir/passes/InferShapes.h"

#include <cstring>
#include <filesystem>
#include <tuple>

namespace sgc::ts_import {
namespace {

struct TorchType {
  int64_t scalarType;
  const char* storage;
  ir::DType dtype;
};
/// torch's ScalarType codes and storage classes (c10/core/ScalarType.h).
const TorchType kTypes[] = {
    {0, "ByteStorage", ir::DType::U8},       {1, "CharStorage", ir::DType::I8},  {2, "ShortStorage", ir::DType::I16},
    {3, "IntStorage", ir::DType::I32},       {4, "LongStorage", ir::DType::I64}, {5, "HalfStorage", ir::DType::F16},
    {6, "FloatStorage", ir::DType::F32},     {7, "DoubleStorage", ir::DType::F64}, {11, "BoolStorage", ir::DType::Bool},
    {15, "BFloat16Storage", ir::DType::BF16},
};

/// Walks the module tree in the pickle's order: each module and tensor is named by the first
/// path that reaches it (a tied weight keeps its first name, as named_parameters does), and
/// the tensors a class lists in __parameters__ are parameters.
Error namePaths(Ctx& c, Py obj, const std::string& path, int depth) {
  if (depth > 256) return makeError(c.file + ": the module tree nests deeper than 256 modules");
  if (c.paths.count(obj)) return Error::success();
  c.paths[obj] = path;
  auto cls = c.classOf(obj);
  if (!cls) return cls.takeError();
  for (const auto& [k, v] : obj->entries) {
    if (!k || k->kind != PyObj::Kind::Str || !v) continue;
    std::string p = path.empty() ? k->s : path + "." + k->s;
    if (v->kind == PyObj::Kind::Tensor) {
      if (!c.paths.count(v)) c.paths[v] = p, c.order[v] = c.order.size();
      for (const auto& name : (*cls)->parameters)
        if (name == k->s) c.params.insert(v);
    } else if (v->kind == PyObj::Kind::Object) {
      if (Error e = namePaths(c, v, p, depth + 1)) return e;
    }
  }
  return Error::success();
}

Expected<std::vector<Py>> tensorList(Py list, const std::string& what) {
  if (!list || (list->kind != PyObj::Kind::Tuple && list->kind != PyObj::Kind::List)) return makeError(what + " is not a list of tensors");
  for (Py t : list->items)
    if (t->kind != PyObj::Kind::Tensor) return makeError(what + " holds " + kindName(*t) + ", expected tensors");
  return list->items;
}

Error readConstants(Ctx& c) {
  if (!c.archive.has("constants.pkl")) return Error::success();
  auto bytes = c.archive.read("constants.pkl");
  if (!bytes) return bytes.takeError();
  auto p = unpickle(*bytes, c.file + ": constants.pkl");
  if (!p) return p.takeError();
  auto list = tensorList((*p)->root, c.file + ": constants.pkl");
  if (!list) return list.takeError();
  for (size_t i = 0; i < list->size(); ++i) {
    auto t = c.tensorOf((*list)[i], "constants", false, "CONSTANTS.c" + std::to_string(i));
    if (!t) return t.takeError();
    c.constants.push_back(*t);
  }
  c.pickles.push_back(std::move(*p));
  return Error::success();
}

/// The forward's argument types from traced_inputs.pkl ({"forward": [tensors]}), when present.
Expected<std::vector<ir::Type>> tracedTypes(Ctx& c) {
  if (!c.archive.has("traced_inputs.pkl")) return std::vector<ir::Type>{};
  auto bytes = c.archive.read("traced_inputs.pkl");
  if (!bytes) return bytes.takeError();
  auto p = unpickle(*bytes, c.file + ": traced_inputs.pkl");
  if (!p) return p.takeError();
  Py fwd = (*p)->root->attr("forward");
  std::vector<ir::Type> types;
  if (fwd) {
    auto list = tensorList(fwd, c.file + ": traced_inputs.pkl's forward");
    if (!list) return list.takeError();
    for (Py t : *list) {
      auto d = dtypeOfStorage(t->tensor.storageType);
      if (!d) return makeError(c.file + ": traced_inputs.pkl: storage type " + t->tensor.storageType + " is not supported");
      types.push_back(ir::Type::of(*d, t->tensor.sizes));
    }
  }
  c.pickles.push_back(std::move(*p));
  return types;
}

Expected<std::unique_ptr<ir::Graph>> importArchiveImpl(const Archive& a, const Options& opt) {
  auto graph = std::make_unique<ir::Graph>();
  Ctx c(*graph, a, a.name());
  for (const char* need : {"data.pkl"})
    if (!a.has(need)) return makeError(a.name() + ": no " + need + ": not a TorchScript archive (torch.save's state dicts hold no code; save the module with torch.jit.save)");
  if (Error e = readConstants(c)) return e;
  auto bytes = a.read("data.pkl");
  if (!bytes) return bytes.takeError();
  auto p = unpickle(*bytes, a.name() + ": data.pkl");
  if (!p) return p.takeError();
  Py root = (*p)->root;
  c.pickles.push_back(std::move(*p));
  if (root->kind != PyObj::Kind::Object) return makeError(a.name() + ": data.pkl holds " + kindName(*root) + ", not a module");
  graph->name = root->s.substr(root->s.rfind('.') + 1);
  if (Error e = namePaths(c, root, "", 0)) return e;
  auto cls = c.classOf(root);
  if (!cls) return cls.takeError();
  auto fwd = (*cls)->methods.find("forward");
  if (fwd == (*cls)->methods.end()) return makeError(a.name() + ": " + root->s + " has no forward method");
  const Def& d = fwd->second;
  if (d.params.empty()) return makeError(a.name() + ": " + root->s + ".forward takes no self: not a module's method");
  auto traced = tracedTypes(c);
  if (!traced) return traced.takeError();
  Val self;
  self.k = Val::K::Module;
  self.obj = root;
  std::vector<Val> args{self};
  for (size_t i = 1; i < d.params.size(); ++i) {
    const std::string& n = d.params[i];
    if (d.types[i] != "Tensor" && !d.types[i].empty()) return makeError(a.name() + ": the forward's argument '" + n + "' is " + d.types[i] + ": only tensor arguments are supported");
    auto it = opt.inputTypes.find(n);
    ir::Type t;
    if (it != opt.inputTypes.end()) t = it->second;
    else if (i - 1 < traced->size()) t = (*traced)[i - 1];
    else
      return makeError(a.name() + ": the forward's argument '" + n + "' (" + d.types[i] +
                       ") has no type: the archive keeps no traced inputs; give it with --input-type " + n + "=TYPE (e.g. i64[2,16])");
    args.push_back(Val::tensor(graph->addInput(n, t)));
  }
  for (const auto& [n, t] : opt.inputTypes)
    if (std::find(d.params.begin() + 1, d.params.end(), n) == d.params.end())
      return makeError(a.name() + ": --input-type names '" + n + "', which is not an argument of the forward");
  auto out = evalDef(c, d, (*cls)->file, args);
  if (!out) return out.takeError();
  std::vector<Val> outs = out->k == Val::K::Tuple ? out->items : std::vector<Val>{*out};
  for (size_t i = 0; i < outs.size(); ++i) {
    if (outs[i].k != Val::K::Tensor) return makeError(a.name() + ": the forward returns " + describe(outs[i]) + ": only tensors can be outputs");
    ir::Value* v = outs[i].t->v;
    std::string name = outs.size() == 1 ? "output" : "output" + std::to_string(i);
    ir::Node* n = graph->addNode(ir::Op::Identity, {v}, 1, "forward/output", {name});
    n->outputs[0]->type = v->type;
    graph->outputs.push_back(n->outputs[0]);
  }
  graph->removeDeadNodes();
  // Parameters in the module's state_dict order (they were made in the order the forward read them).
  std::map<const ir::Value*, size_t> place;
  for (const auto& [py, v] : c.tensors) place[v] = c.order.count(py) ? c.order[py] : SIZE_MAX;
  std::sort(graph->params.begin(), graph->params.end(),
            [&](const ir::Value* x, const ir::Value* y) { return std::tie(place[x], x->name) < std::tie(place[y], y->name); });
  if (Error e = ir::verify(*graph)) return makeError(a.name() + ": " + errorText(std::move(e)));
  if (Error e = ir::inferShapes(*graph)) return makeError(a.name() + ": " + errorText(std::move(e)));
  return graph;
}

} // namespace

std::optional<ir::DType> dtypeOfScalarType(int64_t code) {
  for (const auto& t : kTypes)
    if (t.scalarType == code) return t.dtype;
  return std::nullopt;
}

std::optional<ir::DType> dtypeOfStorage(const std::string& storageType) {
  for (const auto& t : kTypes)
    if (storageType == t.storage) return t.dtype;
  return std::nullopt;
}

Expected<const CodeFile*> Ctx::codeFile(const std::string& qualifier) {
  auto it = code.find(qualifier);
  if (it != code.end()) return &it->second;
  std::string path = "code/" + qualifier;
  for (char& ch : path)
    if (ch == '.') ch = '/';
  path += ".py";
  auto text = archive.read(path);
  if (!text) return text.takeError();
  auto f = parseCode(*text, qualifier, file + ": " + path);
  if (!f) return f.takeError();
  return &(code[qualifier] = std::move(*f));
}

Expected<const ClassDef*> Ctx::classOf(Py obj) {
  const std::string& name = obj->s;
  size_t dot = name.rfind('.');
  if (dot == std::string::npos) return makeError(file + ": class " + name + " has no module");
  auto f = codeFile(name.substr(0, dot));
  if (!f) return f.takeError();
  auto it = (*f)->classes.find(name);
  if (it == (*f)->classes.end()) return makeError(file + ": the code of " + name.substr(0, dot) + " has no class " + name.substr(dot + 1));
  return &it->second;
}

Expected<Val> Ctx::callMethod(const Val& self, const std::string& method, std::vector<Val> args) {
  auto cls = classOf(self.obj);
  if (!cls) return cls.takeError();
  auto it = (*cls)->methods.find(method);
  if (it == (*cls)->methods.end()) return makeError(where + ": " + self.obj->s + " has no method " + method);
  args.insert(args.begin(), self);
  return evalDef(*this, it->second, (*cls)->file, std::move(args));
}

Expected<Val> Ctx::callFunction(const std::string& qualified, std::vector<Val> args, const std::string& at) {
  size_t dot = qualified.rfind('.');
  auto f = codeFile(qualified.substr(0, dot));
  if (!f) return makeError(at + ": " + errorText(f.takeError()));
  auto it = (*f)->functions.find(qualified);
  if (it == (*f)->functions.end()) return makeError(at + ": no function " + qualified + " in the archive's code");
  return evalDef(*this, it->second, file + ": code of " + qualified.substr(0, dot), std::move(args));
}

Expected<ir::Value*> Ctx::tensorOf(Py t, const std::string& folder, bool param, const std::string& path) {
  auto it = tensors.find(t);
  if (it != tensors.end()) return it->second;
  const TensorRef& r = t->tensor;
  std::string what = file + ": tensor " + path + " (storage " + folder + "/" + r.storage + ")";
  auto dtype = dtypeOfStorage(r.storageType);
  if (!dtype) return makeError(what + ": storage type " + r.storageType + " is not supported");
  if (r.storage.find('/') != std::string::npos || r.storage.find("..") != std::string::npos) return makeError(what + ": a storage key may not name a path");
  auto bytes = archive.read(folder + "/" + r.storage);
  if (!bytes) return bytes.takeError();
  size_t elem = ir::dtypeSize(*dtype);
  if ((int64_t)(bytes->size() / elem) < r.storageNumel || bytes->size() % elem)
    return makeError(what + ": the storage holds " + std::to_string(bytes->size()) + " bytes, the pickle says " + std::to_string(r.storageNumel) + " elements of " + std::to_string(elem));
  // The furthest element the view reaches must lie in the storage.
  int64_t numel = 1, last = r.offset;
  for (size_t d = 0; d < r.sizes.size(); ++d) {
    if (r.sizes[d] < 0 || r.strides[d] < 0) return makeError(what + ": negative sizes or strides");
    if (r.sizes[d] > 0 && numel > (int64_t(1) << 40) / r.sizes[d]) return makeError(what + ": too many elements");
    numel *= r.sizes[d];
    if (r.sizes[d] > 0) {
      if (r.strides[d] > (int64_t(1) << 40)) return makeError(what + ": a stride of " + std::to_string(r.strides[d]));
      last += (r.sizes[d] - 1) * r.strides[d];
    }
  }
  if (r.offset < 0 || (numel > 0 && last >= r.storageNumel))
    return makeError(what + ": its view reaches element " + std::to_string(last) + " of a storage of " + std::to_string(r.storageNumel));
  ir::Tensor data;
  data.dtype = *dtype;
  data.shape = r.sizes;
  data.bytes.resize(numel * elem);
  std::vector<int64_t> idx(r.sizes.size(), 0);
  for (int64_t i = 0; i < numel; ++i) {
    int64_t off = r.offset;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * r.strides[d];
    std::memcpy(data.bytes.data() + i * elem, bytes->data() + off * elem, elem);
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < r.sizes[d]) break;
      idx[d] = 0;
    }
  }
  ir::Value* v = param && ir::isFloat(*dtype) ? graph.addParam(path, std::move(data)) : graph.addConst(graph.uniqueName(path), std::move(data));
  tensors[t] = v;
  return v;
}

bool isArchivePath(const std::string& path) {
  for (const char* ext : {".pt", ".pth", ".ptl", ".zip"})
    if (path.size() > strlen(ext) && path.compare(path.size() - strlen(ext), strlen(ext), ext) == 0) return true;
  return false;
}

Expected<std::unique_ptr<ir::Graph>> importArchive(const std::string& path, const Options& options) {
  auto a = Archive::open(path);
  if (!a) return a.takeError();
  return importArchiveImpl(**a, options);
}

Expected<std::unique_ptr<ir::Graph>> importArchiveBytes(std::string bytes, const std::string& name, const Options& options) {
  auto a = Archive::fromBytes(std::move(bytes), name);
  if (!a) return a.takeError();
  return importArchiveImpl(**a, options);
}

} // namespace sgc::ts_import
