// The fp8emu CLI end to end: a short training smoke run on the real Fashion-MNIST files, identical
// metrics for 1 and 2 threads, and clear errors with a non-zero exit for bad input.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "support/cli_runner.hpp"
#include "support/result_files.hpp"
#include "support/idx_writer.hpp"

namespace fs = std::filesystem;

namespace {
using fp8emu::testing::slurp;
std::string metrics_without_seconds(const fs::path& p) { return fp8emu::testing::csv_without_seconds(p); }
using Result = fp8emu::testing::CliResult;
Result run(const std::string& args) { return fp8emu::testing::run_cli(args); }

fs::path scratch(const std::string& name) { return fp8emu::testing::scratch_dir("fp8emu-cli", name); }

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
    CHECK(r.code == 2);
    CHECK(r.output.find("--bogus-flag") != std::string::npos);
  }
  SECTION("unknown recipe") {
    const Result r = run("train --recipe mystery --out " + scratch("rec").string());
    CHECK(r.code == 2);
    CHECK(r.output.find("unknown recipe 'mystery'") != std::string::npos);
  }
  SECTION("missing dataset says how to install it") {
    const Result r = run("train --data-dir /nonexistent/fmnist --out " + scratch("miss").string());
    CHECK(r.code == 2);
    CHECK(r.output.find("apt-get install dataset-fashion-mnist") != std::string::npos);
  }
  SECTION("output folder not writable") {
    const fs::path file = scratch("notadir");
    fs::create_directories(file.parent_path());
    std::ofstream(file.string()) << "x";
    const Result r = run("train --out " + (file / "sub").string());
    CHECK(r.code == 2);
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
    CHECK(r.code == 2);
    CHECK(r.output.find("train-images-idx3-ubyte.gz: truncated") != std::string::npos);
    CHECK(!fs::exists(out / "summary.json"));
  }
}

TEST_CASE("train with recipe all trains FP32 and every recipe side by side", "[cli][smoke][recipes]") {
  const fs::path out = scratch("all");
  const Result r = run("train --recipe all --epochs 1" + kSmall + " --out " + out.string());
  INFO(r.output);
  REQUIRE(r.code == 0);
  const nlohmann::json s = nlohmann::json::parse(slurp(out / "summary.json"));
  for (const char* name : {"fp32", "fp8_delayed", "fp8_current", "fp8_mxfp8", "fp8_block", "fp8_nvfp4"}) {
    INFO(name);
    CHECK(s["runs"][name]["test_accuracy"].get<double>() > 0.5);
  }
  CHECK(s["fp8_minus_fp32_accuracy_pp"].size() == 5);
  CHECK(s["runs"]["fp8_block"]["layers"][0]["scale_input"].is_null());
  CHECK(s["runs"]["fp8_current"]["layers"][0]["scale_input"].get<double>() > 0.0);
}

TEST_CASE("train with ROCm's FNUZ types and with Float8BlockScaling's Blackwell GEMMs", "[cli][smoke][recipes]") {
  const fs::path out = scratch("fnuz"), ocp = scratch("fnuz-ocp");
  const Result r = run("train --recipe all --fnuz --block-mxfp8-gemms --epochs 1" + kSmall + " --out " + out.string());
  INFO(r.output);
  REQUIRE(r.code == 0);
  const Result o = run("train --recipe all --epochs 1" + kSmall + " --out " + ocp.string());
  REQUIRE(o.code == 0);
  const nlohmann::json s = nlohmann::json::parse(slurp(out / "summary.json"));
  const nlohmann::json t = nlohmann::json::parse(slurp(ocp / "summary.json"));
  CHECK(s["config"]["delayed"]["fnuz"].get<bool>());
  CHECK(s["config"]["current"]["fnuz"].get<bool>());
  CHECK(s["config"]["block"]["mxfp8_gemms"].get<bool>());
  for (const char* name : {"fp8_delayed", "fp8_current", "fp8_block"}) {
    INFO(name);
    CHECK(s["runs"][name]["test_accuracy"].get<double>() > 0.5);
    // Other formats (FNUZ), other GEMMs (32-blocks): other training curves than the OCP/Hopper run.
    CHECK(s["runs"][name]["train_loss"].get<double>() != t["runs"][name]["train_loss"].get<double>());
  }
  // The recipes the switches do not touch train bit for bit as without them.
  for (const char* name : {"fp32", "fp8_mxfp8", "fp8_nvfp4"}) {
    INFO(name);
    CHECK(s["runs"][name]["train_loss"].get<double>() == t["runs"][name]["train_loss"].get<double>());
  }
  // A switch of another recipe is refused, not ignored.
  const Result m = run("train --recipe mxfp8 --fnuz --out " + scratch("bad").string());
  CHECK(m.code == 2);
  CHECK(m.output.find("--fnuz is a switch of the per-tensor recipes (delayed, current), not of --recipe mxfp8") !=
        std::string::npos);
  const Result d = run("train --recipe delayed --block-mxfp8-gemms --out " + scratch("bad").string());
  CHECK(d.code == 2);
  CHECK(d.output.find("--block-mxfp8-gemms is a switch of --recipe block") != std::string::npos);
  const Result f32 = run("train --recipe block --block-mxfp8-gemms --block-f32-scales --out " + scratch("bad").string());
  CHECK(f32.code == 2);
  CHECK(f32.output.find("needs power-of-two scales") != std::string::npos);
}

TEST_CASE("bad recipe parameters: clear errors and a non-zero exit", "[cli][errors][recipes]") {
  const std::string out = " --out " + scratch("badparam").string();
  const Result h = run("train --amax-history-len 0" + out);
  CHECK(h.code == 2);
  CHECK(h.output.find("amax_history_len must be >= 1") != std::string::npos);
  const Result e = run("train --recipe current --amax-epsilon -1" + out);
  CHECK(e.code == 2);
  CHECK(e.output.find("amax_epsilon must be finite and >= 0") != std::string::npos);
  const Result f = run("train --format e3m4" + out);
  CHECK(f.code == 2);
  CHECK(f.output.find("unknown FP8 format 'e3m4'") != std::string::npos);
  const Result g = run("train --format e5m2" + out);
  CHECK(g.code == 2);
  CHECK(g.output.find("E5M2-only format is rejected") != std::string::npos);
  CHECK(!fs::exists(scratch("badparam") / "summary.json"));
}

// Expected traces worked by hand from TE's formulas (delayed_scaling.cu kernel_bulk,
// recipe_common.cuh compute_scale_from_amax); E4M3 max 448, E5M2 max 57344 (OCP OFP8 r1.0).
TEST_CASE("scale-trace prints TE's scale evolution as CSV", "[cli][trace]") {
  const Result d = run("scale-trace --recipe delayed --format e4m3 --history-len 2 --algo max --margin 1 "
                       "--amax 4,inf,2,2,0");
  // margin 1: target 224. step 0: 224/4 = 56. step 1: inf enters the window: keep 56.
  // step 2: window {inf, 2}: keep 56. step 3: window {2, 2}: 112. step 4: amax 0: no roll, keep 112.
  // scale_inv = RN(1/scale): 1/56 = 0.0178571437 (%.9g of fp32), 1/112 = 0.00892857183.
  CHECK(d.code == 0);
  CHECK(d.output ==
        "step,amax,scale,scale_inv\n"
        "0,4,56,0.0178571437\n"
        "1,inf,56,0.0178571437\n"
        "2,2,56,0.0178571437\n"
        "3,2,112,0.00892857183\n"
        "4,0,112,0.00892857183\n");
  const Result m = run("scale-trace --recipe delayed --format e5m2 --history-len 1 --algo most_recent "
                       "--amax 7,nan,0x1p-140");
  // 57344/7 = 8192; NaN amax under most_recent keeps the old scale; 57344 / 2^-140 = inf -> FLT_MAX.
  // 1/8192 = 1.220703125e-4 exactly: nine significant digits end in a tie, which glibc's printf
  // rounds to even (0.000122070312).
  CHECK(m.output ==
        "step,amax,scale,scale_inv\n"
        "0,7,8192,0.000122070312\n"
        "1,nan,8192,0.000122070312\n"
        "2,7.17464814e-43,3.40282347e+38,2.93873588e-39\n");
  const Result c = run("scale-trace --recipe current --format e4m3 --pow2 --epsilon 0.5 --amax 3,0,nan");
  // pow2(448/3 = 149.3) = 128; amax 0 raised to epsilon 0.5 -> 896 -> 512; NaN -> 1.
  CHECK(c.output ==
        "step,amax,scale,scale_inv\n"
        "0,3,128,0.0078125\n"
        "1,0,512,0.001953125\n"
        "2,nan,1,1\n");
  const Result bad = run("scale-trace --recipe delayed --amax 1,two");
  CHECK(bad.code == 2);
  CHECK(bad.output.find("'two' is not a number") != std::string::npos);
  const Result mx = run("scale-trace --recipe mxfp8 --amax 1");
  CHECK(mx.code == 2);
  CHECK(mx.output.find("unknown --recipe 'mxfp8'") != std::string::npos);
}

TEST_CASE("train with a tensor-core accumulation model", "[cli][hopper]") {
  // The flag reaches the GEMMs: hopper (the default) and fp32 give the same FP32 run and different
  // FP8 runs (the 14-bit tensor-core accumulator loses bits that fp32 keeps).
  const std::string flags = "train --epochs 1 --train-samples 300 --test-samples 100 --batch-size 50 --quiet ";
  const fs::path out = scratch("hopper"), f32 = scratch("acc-fp32");
  const Result r = run(flags + "--accumulation hopper --out " + out.string());
  INFO(r.output);
  REQUIRE(r.code == 0);
  REQUIRE(run(flags + "--accumulation fp32 --out " + f32.string()).code == 0);
  const nlohmann::json s = nlohmann::json::parse(slurp(out / "summary.json"));
  CHECK(s["config"]["gemm_accumulation"].get<std::string>().rfind("hopper", 0) == 0);
  const nlohmann::json t = nlohmann::json::parse(slurp(f32 / "summary.json"));
  CHECK(t["config"]["gemm_accumulation"].get<std::string>().rfind("fp32", 0) == 0);
  const std::string mh = metrics_without_seconds(out / "metrics.csv"), mf = metrics_without_seconds(f32 / "metrics.csv");
  CHECK(mh.substr(0, mh.find("\nfp8_")) == mf.substr(0, mf.find("\nfp8_")));  // the FP32 run
  CHECK(mh != mf);                                                              // the FP8 run
  CHECK(slurp(out / "layers.csv") != slurp(f32 / "layers.csv"));
  const Result bad = run("train --accumulation tf32 --out " + scratch("badacc").string());
  CHECK(bad.code == 2);
  CHECK(bad.output.find("unknown accumulation model 'tf32'") != std::string::npos);
}

TEST_CASE("review findings stay fixed", "[cli][errors][regression]") {
  SECTION("a quote in --out reaches no shell, and the plot is still written") {
    const fs::path base = scratch("quote");
    fs::create_directories(base);
    const fs::path out = base / "x';touch injected;'";
    const Result r = run("train --epochs 1 --train-samples 200 --test-samples 50 --quiet --out \"" + out.string() + "\"");
    CHECK(r.code == 0);
    CHECK(fs::exists(out / "curves.png"));
    CHECK(!fs::exists(base / "injected"));
    CHECK(!fs::exists("injected"));
  }
  SECTION("a summary.json from an earlier run in the same folder is removed before training") {
    const fs::path out = scratch("stale");
    fs::create_directories(out);
    std::ofstream(out / "summary.json") << "{\"old\": true}";
    std::ofstream(out / "metrics.csv.tmp.12345") << "partial";
    const Result r = run("train --epochs 1 --train-samples 200 --test-samples 50 --quiet --recipe bogus --out " +
                         out.string());
    CHECK(r.code == 2);  // bad config: nothing touched
    CHECK(fs::exists(out / "summary.json"));
    const Result ok = run("train --epochs 1 --train-samples 200 --test-samples 50 --quiet --data-dir /nonexistent --out " +
                          out.string());
    CHECK(ok.code == 2);  // bad data: nothing touched either
    CHECK(fs::exists(out / "summary.json"));
    const Result good = run("train --epochs 1 --train-samples 200 --test-samples 50 --quiet --out " + out.string());
    CHECK(good.code == 0);
    CHECK(slurp(out / "summary.json").find("\"old\"") == std::string::npos);
    CHECK(!fs::exists(out / "metrics.csv.tmp.12345"));
  }
  SECTION("a batch larger than the data is one batch") {
    const fs::path out = scratch("bigbatch");
    const Result r = run("train --epochs 1 --train-samples 200 --test-samples 50 --quiet --batch-size 2147483647 --out " +
                         out.string());
    CHECK(r.code == 0);
    const nlohmann::json s = nlohmann::json::parse(slurp(out / "summary.json"));
    CHECK(s["runs"]["fp32"]["train_loss"].get<double>() > 0.5);  // one step from random weights: about ln 10
  }
  SECTION("a diverged run is reported, with nan in the metrics") {
    const fs::path out = scratch("diverge");
    const Result r = run("train --epochs 1 --train-samples 200 --test-samples 50 --lr 1e30 --out " + out.string());
    CHECK(r.output.find("diverged") != std::string::npos);
    CHECK(slurp(out / "metrics.csv").find("nan") != std::string::npos);
    const nlohmann::json s = nlohmann::json::parse(slurp(out / "summary.json"));
    CHECK(s["runs"]["fp32"]["diverged"].get<bool>());
  }
  SECTION("parameters of recipes that do not run are still checked") {
    const Result r = run("train --recipe delayed --amax-epsilon -1 --out " + scratch("eps").string());
    CHECK(r.code == 2);
    CHECK(r.output.find("amax_epsilon") != std::string::npos);
    const Result h = run("train --amax-history-len 2000000000 --out " + scratch("hist").string());
    CHECK(h.code == 2);
    CHECK(h.output.find("amax_history_len must be >= 1 and <=") != std::string::npos);
  }
  SECTION("empty and mismatched image files are rejected") {
    using fp8emu::testing::idx_bytes;
    using fp8emu::testing::write_gz;
    const fs::path d = scratch("emptyidx");
    fs::create_directories(d);
    write_gz((d / "train-images-idx3-ubyte.gz").string(), idx_bytes(0x08, {0, 28, 28}, {}));
    write_gz((d / "train-labels-idx1-ubyte.gz").string(), idx_bytes(0x08, {0}, {}));
    Result r = run("train --data-dir " + d.string() + " --out " + scratch("emptyout").string());
    CHECK(r.code == 2);
    CHECK(r.output.find("holds no images") != std::string::npos);
    write_gz((d / "train-images-idx3-ubyte.gz").string(), idx_bytes(0x08, {2, 28, 28}, std::vector<std::uint8_t>(2 * 784, 9)));
    write_gz((d / "train-labels-idx1-ubyte.gz").string(), idx_bytes(0x08, {2}, {1, 2}));
    write_gz((d / "t10k-images-idx3-ubyte.gz").string(), idx_bytes(0x08, {2, 14, 14}, std::vector<std::uint8_t>(2 * 196, 9)));
    write_gz((d / "t10k-labels-idx1-ubyte.gz").string(), idx_bytes(0x08, {2}, {1, 2}));
    r = run("train --data-dir " + d.string() + " --out " + scratch("mismatchout").string());
    CHECK(r.code == 2);
    CHECK(r.output.find("test images have 196 pixels, training images 784") != std::string::npos);
    CHECK(!fs::exists(scratch("mismatchout")));
  }
}

TEST_CASE("accumulation-error writes its CSV, table and plot", "[cli][accumulation]") {
  const fs::path out = scratch("accerr");
  const Result r = run("accumulation-error --m 8 --n 8 --k-max 512 --quiet --out " + out.string());
  INFO(r.output);
  REQUIRE(r.code == 0);
  std::stringstream csv(slurp(out / "accumulation_error.csv"));
  std::string line;
  std::getline(csv, line);
  CHECK(line == "distribution,k,model,mean_rel_error,max_rel_error,normwise_rel_error");
  int rows = 0;
  while (std::getline(csv, line)) ++rows;
  CHECK(rows == 2 * 2 * 4);  // 2 distributions x K in {256, 512} x 4 models
  CHECK(slurp(out / "table.md").find("| hopper_fast |") != std::string::npos);
  CHECK(fs::exists(out / "accumulation_error.png"));
  CHECK(run("accumulation-error --k-max 100 --out " + scratch("accerr2").string()).code == 2);
}

TEST_CASE("accumulation-error: sizes that would need gigabytes are refused before any work", "[cli][accumulation][errors]") {
  struct Case {
    std::string flags, message;
  };
  for (const Case& c : {Case{"--m 4097", "--m and --n must be in [1, 4096], got 4097 and 64"},
                        Case{"--n 0", "--m and --n must be in [1, 4096], got 64 and 0"},
                        Case{"--k-max 33554432", "--k-max must be in [256, 16777216], got 33554432"},
                        Case{"--k-max 2147483647", "--k-max must be in [256, 16777216], got 2147483647"},
                        Case{"--m 4096 --k-max 1048576", "must be at most 67108864 elements (256 MiB of fp32 per "
                                                         "operand), got 4096 x 1048576"}}) {
    const fs::path out = scratch("accerr-big");
    const Result r = run("accumulation-error " + c.flags + " --quiet --out " + out.string());
    INFO(c.flags << "\n" << r.output);
    CHECK(r.code == 2);
    CHECK(r.output.find(c.message) != std::string::npos);
    CHECK(!fs::exists(out));
  }
}

namespace {
// Starts the CLI in the background (output discarded) and returns its pid.
pid_t spawn_cli(const std::vector<std::string>& args) {
  const pid_t pid = fork();
  if (pid == 0) {
    std::vector<char*> argv{const_cast<char*>(FP8EMU_CLI_PATH)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    std::freopen("/dev/null", "w", stdout);
    std::freopen("/dev/null", "w", stderr);
    execv(FP8EMU_CLI_PATH, argv.data());
    _exit(127);
  }
  return pid;
}
}  // namespace

TEST_CASE("a run killed with SIGKILL and resumed ends bit-identical to an uninterrupted run", "[cli][checkpoint]") {
  const std::vector<std::string> common{"train", "--epochs", "3", "--train-samples", "2000", "--test-samples", "300",
                                        "--recipe", "all", "--quiet"};
  const fs::path ref = scratch("ck-ref"), out = scratch("ck-run");
  std::string flags;
  for (std::size_t i = 1; i < common.size(); ++i) flags += " " + common[i];
  REQUIRE(run("train" + flags + " --out " + ref.string()).code == 0);

  std::vector<std::string> args = common;
  for (const char* a : {"--checkpoint-every", "1", "--out"}) args.push_back(a);
  args.push_back(out.string());
  const pid_t pid = spawn_cli(args);
  // Kill once a checkpoint exists and an FP8 run has begun (or let it finish on a fast machine).
  for (int i = 0; i < 600; ++i) {
    if (fs::exists(out / "checkpoint.bin") && slurp(out / "metrics.csv").find("fp8_") != std::string::npos) break;
    usleep(50000);
  }
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  const Result r = run("train" + flags + " --checkpoint-every 1 --resume " + out.string());
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(metrics_without_seconds(out / "metrics.csv") == metrics_without_seconds(ref / "metrics.csv"));
  CHECK(slurp(out / "layers.csv") == slurp(ref / "layers.csv"));
  const nlohmann::json a = nlohmann::json::parse(slurp(out / "summary.json")),
                       b = nlohmann::json::parse(slurp(ref / "summary.json"));
  CHECK(a["fp8_minus_fp32_accuracy_pp"] == b["fp8_minus_fp32_accuracy_pp"]);
}

TEST_CASE("corrupt checkpoints and mismatched resumes give clear errors", "[cli][checkpoint][errors]") {
  const fs::path out = scratch("ck-bad");
  const std::string flags = " --epochs 2 --train-samples 300 --test-samples 100 --quiet";
  REQUIRE(run("train" + flags + " --checkpoint-every 1 --out " + out.string()).code == 0);
  // Other settings than the checkpointed run.
  Result r = run("train --epochs 3 --train-samples 300 --test-samples 100 --quiet --resume " + out.string());
  CHECK(r.code == 2);
  CHECK(r.output.find("was written by a run with other settings") != std::string::npos);
  // A flipped byte.
  std::vector<std::uint8_t> bytes = fp8emu::testing::read_all((out / "checkpoint.bin").string());
  REQUIRE(bytes.size() > 100);
  bytes[bytes.size() / 2] ^= 0x40;
  fp8emu::testing::write_plain((out / "checkpoint.bin").string(), bytes);
  r = run("train" + flags + " --resume " + out.string());
  CHECK(r.code == 2);
  CHECK(r.output.find("corrupt checkpoint (checksum mismatch)") != std::string::npos);
  CHECK(fs::exists(out / "summary.json"));  // a failed resume loses nothing
  // Nothing to resume from.
  const fs::path none = scratch("ck-none");
  r = run("train" + flags + " --resume " + none.string());
  CHECK(r.code == 2);
  CHECK(r.output.find("no checkpoint to resume from") != std::string::npos);
  CHECK(!fs::exists(none));  // nothing created
  // Checkpoints of format 1 (before data parallelism) and 3 (before train and train-lm shared their
  // log and state layout): the magic string and a valid CRC.
  for (const std::string magic : {"FP8EMU-CHECKPOINT-1", "FP8EMU-CHECKPOINT-3"}) {
    const fs::path old_format = scratch("ck-v" + magic.substr(magic.size() - 1));
    fs::create_directories(old_format);
    std::vector<std::uint8_t> v1(8, 0);
    v1[0] = std::uint8_t(magic.size());
    v1.insert(v1.end(), magic.begin(), magic.end());
    const std::uint32_t crc = std::uint32_t(crc32(0L, v1.data(), uInt(v1.size())));
    for (int i = 0; i < 4; ++i) v1.push_back(std::uint8_t(crc >> (8 * i)));
    fp8emu::testing::write_plain((old_format / "checkpoint.bin").string(), v1);
    r = run("train" + flags + " --resume " + old_format.string());
    CHECK(r.code == 2);
    CHECK(r.output.find("written by another fp8emu version (format " + magic +
                        "; this one reads FP8EMU-CHECKPOINT-4), so it cannot be resumed") != std::string::npos);
  }
}

TEST_CASE("data-parallel shards on one process: thread-independent, amax group matters, bad flags",
          "[cli][dp]") {
  // The shards of --dp-shards run one after the other without mpirun (the MPI tests, label mpi,
  // check that N ranks give these same bits).
  const std::string flags = " --epochs 1 --train-samples 600 --test-samples 200 --batch-size 60 --hidden 32 --quiet "
                            "--recipe delayed --dp-shards 4";
  const fs::path a = scratch("dp-t1"), b = scratch("dp-t2"), none = scratch("dp-none"), one = scratch("dp-one");
  REQUIRE(run("train --threads 1" + flags + " --out " + a.string()).code == 0);
  REQUIRE(run("train --threads 2" + flags + " --out " + b.string()).code == 0);
  CHECK(metrics_without_seconds(a / "metrics.csv") == metrics_without_seconds(b / "metrics.csv"));
  CHECK(slurp(a / "shards.csv") == slurp(b / "shards.csv"));
  REQUIRE(run("train" + flags + " --amax-reduction none --out " + none.string()).code == 0);
  CHECK(metrics_without_seconds(none / "metrics.csv") != metrics_without_seconds(a / "metrics.csv"));
  const nlohmann::json sa = nlohmann::json::parse(slurp(a / "summary.json"));
  const nlohmann::json sn = nlohmann::json::parse(slurp(none / "summary.json"));
  CHECK(sa["runs"]["fp8_delayed"]["data_parallel"]["max_scale_ratio_across_shards"] == 1.0);
  CHECK(sn["runs"]["fp8_delayed"]["data_parallel"]["max_scale_ratio_across_shards"].get<double>() > 1.0);
  CHECK(sa["config"]["data_parallel"]["dp_shards"] == 4);
  // One shard is the plain run: no shards.csv.
  REQUIRE(run("train" + flags.substr(0, flags.find(" --dp-shards")) + " --out " + one.string()).code == 0);
  CHECK(!fs::exists(one / "shards.csv"));

  for (const auto& [bad, message] : std::vector<std::pair<std::string, std::string>>{
           {"--dp-shards 0", "--dp-shards must be >= 1, got 0"},
           {"--dp-shards 4 --amax-reduction group=3", "--amax-reduction group=3: the group size must divide --dp-shards 4"},
           {"--amax-reduction all", "unknown --amax-reduction 'all' (accepted: dp, none, group=K"},
           {"--dp-shards 61", "--dp-shards 61 exceeds the batch of 60 images"}}) {
    const fs::path out = scratch("dp-bad");
    const Result r = run("train --epochs 1 --train-samples 600 --test-samples 200 --batch-size 60 --quiet " + bad +
                         " --out " + out.string());
    INFO(bad << "\n" << r.output);
    CHECK(r.code == 2);
    CHECK(r.output.find(message) != std::string::npos);
    CHECK(!fs::exists(out));
  }
}
