// Helpers shared by the sgc subcommands: loading a model (ONNX or IR text),
// converting between safetensors and IR tensors, reporting errors.
#pragma once
#include "driver/Args.h"
#include "ir/Error.h"
#include "ir/Graph.h"
#include "runtime/Safetensors.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace sgc::driver {

/// Loads an ONNX model, a TorchScript archive (.pt), or IR text when the path ends in .sgcir.
/// `inputTypes` (the --input-type flag: "name=i64[2,16],...") types a TorchScript forward's arguments.
Expected<std::unique_ptr<ir::Graph>> loadModel(const std::string& path, const std::string& inputTypes = "");

/// The --input-type flag's value: "name=DTYPE[d0,d1,...]" entries separated by commas.
Expected<std::map<std::string, ir::Type>> parseInputTypes(const std::string& s);

Expected<ir::Tensor> fromSafetensors(const rt::StTensor& t, const std::string& what);
rt::StTensor toSafetensors(const ir::Tensor& t);

/// Warns on stderr when values of `g` are Identity copies of a parameter: in the training step
/// they are that one parameter, trained once. torch.onnx.export writes them for initializers of
/// equal value (LayerNorm weights of ones, say) unless it exports in training mode, which the
/// PyTorch model trains apart.
void warnCopiedParameters(const ir::Graph& g, const std::string& model);

/// Prints "sgc: <message>" to stderr and returns exit status 1.
int reportError(Error e);
int reportError(const std::string& msg);

/// Parses a subcommand's arguments, which must hold exactly one positional
/// argument (`what`: "one model", "one file", ...). When it returns nullopt,
/// `exitStatus` is what the subcommand returns: 0 after --help, 2 for a usage
/// error, 1 for a wrong count (reported).
std::optional<Args> parseCommand(const CommandSpec& spec, int argc, char** argv, const char* what, int& exitStatus);

/// "1,234,567"
std::string withCommas(int64_t n);

/// Writes every parameter and state tensor of `g` (only the parameters with
/// `paramsOnly`) to a safetensors file (atomically).
Error saveCheckpoint(const ir::Graph& g, const std::string& path, bool paramsOnly = false);
/// Loads a checkpoint into `g`'s parameters and state, checking that names,
/// dtypes and shapes match exactly; `g` is untouched on error.
Error loadCheckpoint(ir::Graph& g, const std::string& path);
/// Checks, before any training, that --save PATH can be written at the end: its folder exists,
/// and it is none of the files the run reads (`inputs`: the library being run, the data).
/// (--trace and --metrics too, `flag` naming the option.)
Error checkSavePath(const std::string& path, const std::vector<std::string>& inputs, const std::string& flag = "--save");

int inspectMain(int argc, char** argv);
int opsMain(int argc, char** argv);
int trainMain(int argc, char** argv);
int trainLibrary(const std::string& path, const class Args& args, int64_t steps);
int compileMain(int argc, char** argv);
int runMain(int argc, char** argv);
int optMain(int argc, char** argv);
int generateMain(int argc, char** argv);

} // namespace sgc::driver
