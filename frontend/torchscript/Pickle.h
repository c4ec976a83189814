// The restricted unpickler of TorchScript archives' data.pkl and
// constants.pkl (pickle protocol 2, as torch's own writer emits it). Only the
// globals an archive needs are accepted: TorchScript classes (__torch__.*),
// which become plain objects with their state dict; tensors rebuilt by
// torch._utils._rebuild_tensor_v2 from typed storages; OrderedDict; and
// torch.jit._pickle's list builders and type tags. Any other global is an
// error naming it, so loading a file never runs or imports anything.
#pragma once
#include "ir/Error.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace sgc::ts_import {

struct PyObj;
using Py = const PyObj*; ///< owned by the Pickled it came from

/// A tensor as the pickle describes it: a view of a storage.
struct TensorRef {
  std::string storage;       ///< the storage's key (its entry under data/ or constants/)
  std::string storageType;   ///< e.g. "FloatStorage"
  int64_t storageNumel = 0;  ///< elements the storage holds, as the pickle says
  int64_t offset = 0;        ///< in elements
  std::vector<int64_t> sizes, strides;
  bool requiresGrad = false;
};

struct PyObj {
  enum class Kind { None, Bool, Int, Float, Str, Tuple, List, Dict, Object, Tensor, Global, Storage } kind = Kind::None;
  int64_t i = 0;                          ///< Bool, Int
  double f = 0;                           ///< Float
  std::string s;                          ///< Str; the class of an Object ("__torch__.a.b.C"); a Global's name
  std::vector<Py> items;                  ///< Tuple, List
  std::vector<std::pair<Py, Py>> entries; ///< Dict; an Object's state
  TensorRef tensor;                       ///< Tensor; a Storage's storage fields

  /// An Object's (or a Dict's) entry with string key `key`, nullptr when absent.
  Py attr(const std::string& key) const;
};

/// An unpickled file: the objects it made (a hostile file may make cycles; the arena frees them all).
struct Pickled {
  std::vector<std::unique_ptr<PyObj>> arena;
  Py root = nullptr;
};

/// Unpickles `bytes`; `what` names the file in errors.
Expected<std::unique_ptr<Pickled>> unpickle(const std::string& bytes, const std::string& what);

/// A short description of a value's kind, for errors ("a list", "an int").
std::string kindName(const PyObj& o);

} // namespace sgc::ts_import
