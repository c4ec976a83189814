// The TorchScript frontend: an archive written by torch.jit.save (any torch
// version: the archive is read by sgc's own reader, not by libtorch) to an
// sgc IR graph. The module's parameters become parameters named by their
// dotted paths ("m.transformer.h.0.attn.c_attn.weight", as in its
// state_dict); buffers become constants, or parameters that a training step
// updates (BatchNorm's running statistics); the forward's arguments become
// the graph's inputs, typed from the inputs the module was traced with
// (traced_inputs.pkl) or from `inputTypes`. The forward is evaluated at
// import with static shapes, each aten op mapped onto IR ops (Aten.def lists
// them). After import, infer-shapes has run and the graph is verified.
#pragma once
#include "ir/Error.h"
#include "ir/Graph.h"

#include <map>
#include <memory>
#include <string>

namespace sgc::ts_import {

struct Options {
  std::map<std::string, ir::Type> inputTypes; ///< forward argument -> type (overrides the traced inputs)
};

/// Whether `path` names a TorchScript archive (a .pt / .pth / .ptl file, or a zip whose entries hold data.pkl).
bool isArchivePath(const std::string& path);

/// Imports the archive at `path`. Errors start with the path.
Expected<std::unique_ptr<ir::Graph>> importArchive(const std::string& path, const Options& options = {});

/// Imports the bytes of an archive; `name` is used in errors.
Expected<std::unique_ptr<ir::Graph>> importArchiveBytes(std::string bytes, const std::string& name, const Options& options = {});

} // namespace sgc::ts_import
