/// \file plot.hpp
/// \brief PNG plots through gnuplot (Debian's gnuplot-nox), written atomically, under a time limit.
#pragma once

#include <string>

namespace fp8emu::io {

/// Runs a gnuplot script whose terminal output is the placeholder `@OUTPUT@` and moves the PNG to
/// `png_path` only when gnuplot succeeded and wrote a non-empty file. gnuplot runs without a shell,
/// in the PNG's folder, with the script on its standard input and its output discarded; the
/// placeholder becomes a fixed relative name, so no user-supplied path reaches a shell or the
/// script. gnuplot (and whatever it started, its process group) is killed when it has not finished
/// within gnuplot_timeout_seconds(). Returns false, after one `note:` line on stderr naming the
/// cause (not installed, cannot be started, exit status, killed by a signal, time limit, no image),
/// when the PNG was not written; never throws for that (a plot is an extra).
bool render_png(const std::string& gnuplot_script, const std::string& png_path);

/// The time limit of one gnuplot run: the environment variable FP8EMU_GNUPLOT_TIMEOUT (seconds, a
/// number in (0, 86400]), 60 when it is unset or empty. A value that is not such a number gives
/// the default, and `note` (when not null) says so.
double gnuplot_timeout_seconds(std::string* note = nullptr);

}  // namespace fp8emu::io
