// Optional tools: `fp8emu train`, `train-lm` and `accumulation-error` run to the end, exit 0 and
// write every result file when gnuplot is not on PATH, when it fails (exit 3), when it hangs (killed
// after FP8EMU_GNUPLOT_TIMEOUT seconds) and when it writes no image; each time one note names the
// cause. A stand-in gnuplot that writes a file shows the plot path itself works (and that the
// stand-ins on PATH are the gnuplot fp8emu runs). Tiny sizes: seconds per command.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/cli_runner.hpp"
#include "support/idx_writer.hpp"
#include "support/result_files.hpp"

namespace fs = std::filesystem;

namespace {
using fp8emu::testing::slurp;

fs::path scratch(const std::string& name) { return fp8emu::testing::scratch_dir("fp8emu-tools", name); }

// A folder holding only an executable `gnuplot` with this shell body (none for an empty body).
std::string tool_dir(const std::string& name, const std::string& body) {
  const fs::path d = scratch("bin-" + name);
  fs::create_directories(d);
  if (!body.empty()) {
    std::ofstream(d / "gnuplot") << "#!/bin/sh\n" << body << "\n";
    ::chmod((d / "gnuplot").c_str(), 0755);
  }
  return d.string();
}

// A tiny Fashion-MNIST look-alike: 8x8 images, 40 training and 20 test images.
std::string tiny_idx_dataset() {
  const fs::path d = scratch("idx");
  fs::create_directories(d);
  using fp8emu::testing::idx_bytes;
  for (const auto& [prefix, n] : std::vector<std::pair<std::string, std::uint32_t>>{{"train", 40}, {"t10k", 20}}) {
    std::vector<std::uint8_t> pixels(n * 64), labels(n);
    for (std::uint32_t i = 0; i < n; ++i) {
      labels[i] = std::uint8_t(i % 10);
      for (std::uint32_t p = 0; p < 64; ++p) pixels[i * 64 + p] = std::uint8_t((p * 7 + labels[i] * 29) & 0xFF);
    }
    fp8emu::testing::write_gz((d / (prefix + "-images-idx3-ubyte.gz")).string(), idx_bytes(0x08, {n, 8, 8}, pixels));
    fp8emu::testing::write_gz((d / (prefix + "-labels-idx1-ubyte.gz")).string(), idx_bytes(0x08, {n}, labels));
  }
  return d.string();
}

std::string tiny_corpus() {
  const fs::path p = scratch("corpus.txt");
  fs::create_directories(p.parent_path());
  std::ofstream f(p);
  const char* words[] = {"plot", "or", "no", "plot", "results", "stay", "written"};
  for (int i = 0; i < 1500; ++i) f << words[(i * 5 + i / 7) % 7] << (i % 11 == 10 ? ".\n" : " ");
  return p.string();
}

struct Command {
  std::string name, args, png;
  std::vector<std::string> files;  // result files that must exist
};

std::vector<Command> commands() {
  return {
      {"train",
       "train --data-dir " + tiny_idx_dataset() +
           " --epochs 1 --hidden 8 --batch-size 10 --train-samples 40 --test-samples 20 --quiet",
       "curves.png",
       {"metrics.csv", "layers.csv", "summary.json"}},
      {"train-lm",
       "train-lm --text " + tiny_corpus() +
           " --d-model 8 --heads 2 --layers 1 --ffn 16 --seq-len 8 --batch-size 2 --steps 4 --eval-every 2"
           " --eval-batches 1 --sample-chars 8 --quiet",
       "curves.png",
       {"metrics.csv", "layers.csv", "samples.txt", "summary.json"}},
      {"accumulation-error", "accumulation-error --m 2 --n 2 --k-max 256 --quiet", "accumulation_error.png",
       {"accumulation_error.csv", "table.md"}},
  };
}

// What the summary says about the plot: train's files.plot ("" without one), train-lm's plot (null).
void check_summary_plot(const Command& c, const fs::path& out, bool plotted) {
  if (c.name == "accumulation-error") return;
  const nlohmann::json j = nlohmann::json::parse(slurp(out / "summary.json"));
  if (c.name == "train") CHECK(j["files"]["plot"] == (plotted ? "curves.png" : ""));
  if (c.name == "train-lm") {
    if (plotted) CHECK(j["plot"] == "curves.png");
    else CHECK(j["plot"].is_null());
  }
}

// Runs every command with `env`; each must finish (exit 0) with all its files, no PNG, no
// temporary file left behind, and `note` in its output; within `max_seconds` each.
void check_all_without_plot(const std::string& way, const std::string& env, const std::string& note,
                            double max_seconds) {
  for (const Command& c : commands()) {
    const fs::path out = scratch(way + "-" + c.name);
    const auto t0 = std::chrono::steady_clock::now();
    const fp8emu::testing::CliResult r = fp8emu::testing::run_cli_env(env, c.args + " --out " + out.string());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    INFO(way << ": " << c.name << " (" << seconds << " s)\n" << r.output);
    CHECK(r.code == 0);
    for (const std::string& f : c.files) {
      INFO(f);
      CHECK(fs::file_size(out / f) > 0);
    }
    CHECK(!fs::exists(out / c.png));
    for (const auto& e : fs::directory_iterator(out)) CHECK(e.path().filename().string().find(".tmp.") == std::string::npos);
    CHECK(r.output.find("note: " + c.png + " not written: " + note) != std::string::npos);
    CHECK(seconds < max_seconds);
    check_summary_plot(c, out, false);
  }
}
}  // namespace

TEST_CASE("optional tools: gnuplot not on PATH", "[cli][optional-tools]") {
  check_all_without_plot("missing", "PATH=" + tool_dir("none", ""), "gnuplot is not installed", 60);
}

TEST_CASE("optional tools: gnuplot exits with status 3", "[cli][optional-tools]") {
  check_all_without_plot("fails", "PATH=" + tool_dir("fails", "exit 3"), "gnuplot failed (exit 3)", 60);
}

TEST_CASE("optional tools: gnuplot hangs and is killed after FP8EMU_GNUPLOT_TIMEOUT", "[cli][optional-tools]") {
  // The stand-in neither reads its script nor exits for 30 s; its `sleep` child is in gnuplot's
  // process group and dies with it. Each command must end about 2 s after its plot started.
  check_all_without_plot("hangs",
                         "FP8EMU_GNUPLOT_TIMEOUT=2 PATH=" + tool_dir("hangs", "sleep 30") + ":/usr/bin:/bin",
                         "gnuplot did not finish within 2 s and was stopped", 20);
}

TEST_CASE("optional tools: gnuplot exits 0 without writing the image", "[cli][optional-tools]") {
  check_all_without_plot("no-image", "PATH=" + tool_dir("no-image", "cat > /dev/null") + ":/usr/bin:/bin",
                         "gnuplot wrote no image", 60);
}

TEST_CASE("optional tools: a bad FP8EMU_GNUPLOT_TIMEOUT falls back to 60 s with a note", "[cli][optional-tools]") {
  const Command c = commands()[2];  // accumulation-error: the quickest
  const fs::path out = scratch("bad-timeout");
  const fp8emu::testing::CliResult r = fp8emu::testing::run_cli_env(
      "FP8EMU_GNUPLOT_TIMEOUT=soon PATH=" + tool_dir("fails-too", "exit 3"), c.args + " --out " + out.string());
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(r.output.find("note: FP8EMU_GNUPLOT_TIMEOUT='soon' is not a number of seconds") != std::string::npos);
  CHECK(fs::exists(out / "table.md"));
}

TEST_CASE("optional tools: a working stand-in gnuplot gives the plot and the summary names it",
          "[cli][optional-tools]") {
  // Writes 'PNG' to the file named by the script's `set output '...'` line, in its working folder.
  const std::string fake = tool_dir("works", "out=$(sed -n \"s/^set output '\\(.*\\)'$/\\1/p\")\n"
                                             "printf PNG > \"$out\"");
  for (const Command& c : commands()) {
    const fs::path out = scratch("works-" + c.name);
    const fp8emu::testing::CliResult r =
        fp8emu::testing::run_cli_env("PATH=" + fake + ":/usr/bin:/bin", c.args + " --out " + out.string());
    INFO(c.name << "\n" << r.output);
    CHECK(r.code == 0);
    CHECK(slurp(out / c.png) == "PNG");
    CHECK(r.output.find("note:") == std::string::npos);
    check_summary_plot(c, out, true);
  }
}
