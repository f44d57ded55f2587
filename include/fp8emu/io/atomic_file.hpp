/// \file atomic_file.hpp
/// \brief Atomic result files: content goes to a temporary file in the same folder, is flushed to
/// disk, then renamed over the target, so a reader never sees a truncated file.
#pragma once

#include <string>

namespace fp8emu::io {

/// Write `content` to `path` atomically (write temp, fsync, rename).
/// \throws fp8emu::Error naming the path when the folder is not writable or the disk is full.
void write_file_atomic(const std::string& path, const std::string& content);

/// Create `dir` (and parents) if needed and check that files can be created in it.
/// \throws fp8emu::Error "output folder ... is not writable: <reason>".
void ensure_writable_dir(const std::string& dir);

}  // namespace fp8emu::io
