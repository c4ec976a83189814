// Errors in the compiler: llvm::Error / llvm::Expected carrying one
// lower-case message that names the file, the node and what was expected.
#pragma once
#include <llvm/Support/Error.h>

#include <string>

namespace sgc {

using llvm::Error;
using llvm::Expected;

/// A recoverable error (bad model, bad call) with the given message.
inline Error makeError(const std::string& msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

/// The message of an error, consuming it.
inline std::string errorText(Error e) { return llvm::toString(std::move(e)); }

} // namespace sgc
