// Reading one named section of an ELF file with plain file I/O, so that
// `sgc inspect LIB.so` describes a library without loading it (loading runs
// its constructors, and a truncated file would fault inside the loader).
#pragma once
#include "ir/Error.h"

#include <string>

namespace sgc::driver {

/// The bytes of section `name` of the 64-bit little-endian ELF file at `path`; every offset is
/// checked against the file's size.
Expected<std::string> readElfSection(const std::string& path, const std::string& name);

} // namespace sgc::driver
