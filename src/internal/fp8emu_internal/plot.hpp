/// \file plot.hpp
/// \brief PNG plots through gnuplot (Debian's gnuplot-nox), written atomically.
#pragma once

#include <string>

namespace fp8emu::io {

/// Runs a gnuplot script whose terminal output is the placeholder `@OUTPUT@` and moves the PNG to
/// `png_path` only when gnuplot succeeded and wrote a non-empty file. gnuplot runs without a shell,
/// in the PNG's folder, with the script on its standard input and its output discarded; the
/// placeholder becomes a fixed relative name, so no user-supplied path reaches a shell or the
/// script. Returns false, after one `note:` line on stderr, when gnuplot is not installed or fails;
/// never throws for that (a plot is an extra).
bool render_png(const std::string& gnuplot_script, const std::string& png_path);

}  // namespace fp8emu::io
