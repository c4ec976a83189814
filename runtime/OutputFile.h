// Writing output files (checkpoints, libraries, tensors, IR) without losing
// what was there: content goes to a temporary file beside the target, is
// fsynced, and is renamed into place, and the folder is fsynced; a symbolic
// link is followed (the file it points to is replaced, the link stays); a
// device or pipe (-o /dev/null, a FIFO) is written directly, never replaced
// by a regular file.
#pragma once
#include <string>

namespace sgc::rt {

/// Where a write to `path` lands: `path` with symbolic links followed (even a dangling one's).
std::string outputTarget(const std::string& path);

/// The folder `path` lies in ("." for a bare name).
std::string folderOf(const std::string& path);

/// A temporary path beside outputTarget(path) (for a device or pipe, in $TMPDIR), for commitOutput.
std::string temporaryFor(const std::string& path);

/// Puts the finished temporary file `tmp` at `path` (see above); removes `tmp` either way.
bool commitOutput(const std::string& tmp, const std::string& path, std::string& error);

/// Writes `size` bytes to `path` the same way.
bool writeOutput(const std::string& path, const void* data, size_t size, std::string& error);

/// Whether `a` and `b` name the same existing file (links followed).
bool sameFile(const std::string& a, const std::string& b);

} // namespace sgc::rt
