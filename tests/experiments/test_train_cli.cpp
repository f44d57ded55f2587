// The fp8emu CLI end to end: a short training smoke run on the real Fashion-MNIST files, identical
// metrics for 1 and 2 threads, and clear errors with a non-zero exit for bad input.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "support/idx_writer.hpp"

namespace fs = std::filesystem;

namespace {
struct Result {
  int code;
  std::string output;
};

Result run(const std::string& args) {
  const std::string cmd = std::string(FP8EMU_CLI_PATH) + " " + args + " 2>&1";
  std::FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// metrics.csv without the wall-clock column.
std::string metrics_without_seconds(const fs::path& p) {
  std::stringstream in(slurp(p)), out;
  std::string line;
  while (std::getline(in, line)) out << line.substr(0, line.rfind(',')) << '\n';
  return out.str();
}

fs::path scratch(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("fp8emu-cli-" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  return d;
}

const std::string kData = FP8EMU_DEFAULT_DATA_DIR;
const std::string kSmall = " --train-samples 1200 --test-samples 300 --batch-size 50 --quiet";
}  // namespace

TEST_CASE("smoke: fp8emu train writes metrics, layers and summary for both runs", "[cli][smoke]") {
  INFO("Fashion-MNIST is missing: run scripts/setup (apt-get install dataset-fashion-mnist)");
  REQUIRE(fs::exists(kData + "/train-images-idx3-ubyte.gz"));
  const fs::path out = scratch("smoke");
  const Result r = run("train --epochs 2" + kSmall + " --out " + out.string());
  INFO(r.output);
  REQUIRE(r.code == 0);
  const nlohmann::json s = nlohmann::json::parse(slurp(out / "summary.json"));
  for (const char* run_name : {"fp32", "fp8_delayed"}) {
    const auto& run_j = s["runs"][run_name];
    CHECK(run_j["test_accuracy"].get<double>() > 0.5);  // 10 classes: chance is 0.1
    CHECK(run_j["test_accuracy"].get<double>() <= 1.0);
    CHECK(run_j["train_loss"].get<double>() > 0.0);
    CHECK(run_j["seconds"].get<double>() > 0.0);
  }
  CHECK(s["runs"]["fp8_delayed"]["layers"].size() == 3);
  CHECK(s["config"]["recipe"] == "delayed");
  std::stringstream m(slurp(out / "metrics.csv"));
  std::string line;
  int lines = 0;
  while (std::getline(m, line)) ++lines;
  CHECK(lines == 1 + 2 * 2);
  CHECK(fs::exists(out / "layers.csv"));
  CHECK(r.output.find("fp8_delayed") != std::string::npos);
}

TEST_CASE("same seed: bit-identical metrics with 1 and 2 threads", "[cli][determinism]") {
  const fs::path a = scratch("t1"), b = scratch("t2");
  REQUIRE(run("train --epochs 1 --threads 1" + kSmall + " --out " + a.string()).code == 0);
  REQUIRE(run("train --epochs 1 --threads 2" + kSmall + " --out " + b.string()).code == 0);
  CHECK(metrics_without_seconds(a / "metrics.csv") == metrics_without_seconds(b / "metrics.csv"));
  CHECK(slurp(a / "layers.csv") == slurp(b / "layers.csv"));
  CHECK(!slurp(a / "layers.csv").empty());
}

TEST_CASE("bad input: clear errors and a non-zero exit", "[cli][errors]") {
  SECTION("unknown flag") {
    const Result r = run("train --bogus-flag 3");
    CHECK(r.code != 0);
    CHECK(r.output.find("--bogus-flag") != std::string::npos);
  }
  SECTION("unknown recipe") {
    const Result r = run("train --recipe mystery --out " + scratch("rec").string());
    CHECK(r.code != 0);
    CHECK(r.output.find("unknown recipe 'mystery'") != std::string::npos);
  }
  SECTION("missing dataset says how to install it") {
    const Result r = run("train --data-dir /nonexistent/fmnist --out " + scratch("miss").string());
    CHECK(r.code != 0);
    CHECK(r.output.find("apt-get install dataset-fashion-mnist") != std::string::npos);
  }
  SECTION("output folder not writable") {
    const fs::path file = scratch("notadir");
    fs::create_directories(file.parent_path());
    std::ofstream(file.string()) << "x";
    const Result r = run("train --out " + (file / "sub").string());
    CHECK(r.code != 0);
    CHECK(r.output.find("output folder") != std::string::npos);
    CHECK(!fs::exists(file / "sub"));
  }
  SECTION("truncated IDX file names the file") {
    const fs::path d = scratch("trunc");
    fs::create_directories(d);
    using fp8emu::testing::idx_bytes;
    fp8emu::testing::write_gz((d / "train-images-idx3-ubyte.gz").string(),
                              idx_bytes(0x08, {10, 28, 28}, std::vector<std::uint8_t>(5000, 1)));
    fp8emu::testing::write_gz((d / "train-labels-idx1-ubyte.gz").string(),
                              idx_bytes(0x08, {10}, std::vector<std::uint8_t>(10, 1)));
    const fs::path out = scratch("trunc-out");
    const Result r = run("train --data-dir " + d.string() + " --out " + out.string());
    CHECK(r.code != 0);
    CHECK(r.output.find("train-images-idx3-ubyte.gz: truncated") != std::string::npos);
    CHECK(!fs::exists(out / "summary.json"));
  }
}
