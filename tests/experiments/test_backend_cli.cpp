// --backend, --strict and `fp8emu doctor` (include/fp8emu/backend/select.hpp). Without a usable
// GPU (CI) `--backend cuda` must fall back to the emulator with one line and record it; --strict
// must refuse. On a machine with a usable GPU the same flags run the GPU
// kernels, which must also give the emulated results (the bit-exactness claim of the backend).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "support/cli_runner.hpp"
#include "support/result_files.hpp"

namespace fs = std::filesystem;

namespace {
using fp8emu::testing::slurp;
std::string metrics_without_seconds(const fs::path& p) { return fp8emu::testing::csv_without_seconds(p); }
using Result = fp8emu::testing::CliResult;
Result run(const std::string& args) { return fp8emu::testing::run_cli(args); }

fs::path scratch(const std::string& name) { return fp8emu::testing::scratch_dir("fp8emu-backend", name); }

const std::string kSmall = " --epochs 1 --train-samples 600 --test-samples 200 --batch-size 50 --quiet";

bool gpu_usable() { return run("doctor").output.find("cuda       yes") != std::string::npos; }
}  // namespace

TEST_CASE("doctor inspects the machine and says which backends can run", "[cli][backend]") {
  const Result r = run("doctor");
  CHECK(r.code == 0);
  CHECK(r.output.find("emulated   yes") != std::string::npos);
  CHECK(r.output.find("OpenMP:") != std::string::npos);
  const bool usable = r.output.find("cuda       yes") != std::string::npos;
  if (!usable) CHECK(r.output.find("cuda       no: ") != std::string::npos);  // and why
}

TEST_CASE("backend cuda: without a GPU the emulator runs and says so, with one the emulator's bits",
          "[cli][backend]") {
  const fs::path e = scratch("emulated"), c = scratch("cuda");
  const Result re = run("train" + kSmall + " --backend emulated --out " + e.string());
  const Result rc = run("train" + kSmall + " --backend cuda --out " + c.string());
  REQUIRE(re.code == 0);
  REQUIRE(rc.code == 0);
  const std::string fallback = "the cuda backend cannot run, using the bit-exact CPU emulator";
  if (!gpu_usable()) {  // the same program runs both: only the fallback and its record are checked
    CHECK(rc.output.find(fallback) != std::string::npos);
    CHECK(re.output.find(fallback) == std::string::npos);
    // summary.json records what ran, and why.
    const std::string summary = slurp(c / "summary.json");
    CHECK(summary.find("\"backend_used\": \"fc1=emulated,fc2=emulated,fc3=emulated\"") != std::string::npos);
    CHECK(summary.find("\"backend_fallback\"") != std::string::npos);
  } else {  // the GPU's results against the emulator's (the claim this test exists for)
    CHECK(rc.output.find(fallback) == std::string::npos);
    CHECK(metrics_without_seconds(e / "metrics.csv") == metrics_without_seconds(c / "metrics.csv"));
    CHECK(slurp(e / "layers.csv") == slurp(c / "layers.csv"));
  }
}

TEST_CASE("strict mode refuses a cuda backend that cannot run, before writing anything", "[cli][backend]") {
  if (gpu_usable()) {
    WARN("a usable GPU is present: nothing to refuse");
    return;
  }
  const fs::path d = scratch("strict");
  const Result r = run("train" + kSmall + " --backend cuda --strict --out " + d.string());
  CHECK(r.code == 2);
  CHECK(r.output.find("--backend cuda cannot run (--strict)") != std::string::npos);
  CHECK(!fs::exists(d));
  // Per layer too.
  CHECK(run("train" + kSmall + " --backend fc2=cuda --strict --out " + d.string()).code == 2);
}

TEST_CASE("command-line errors: one line and exit 2", "[cli][errors]") {
  for (const char* args : {"table", "bogus", "train --epochs abc", "explain 5 --bogus", "convert a.npy b.npy"}) {
    const Result r = run(args);
    INFO(args << "\n" << r.output);
    CHECK(r.code == 2);
    CHECK(r.output.rfind("fp8emu: error: ", 0) == 0);
  }
  CHECK(run("--help").code == 0);
  CHECK(run("explain --help").code == 0);
}

TEST_CASE("per-layer backends: a reference (FP32) layer changes the FP8 run, names are checked", "[cli][backend]") {
  const fs::path e = scratch("all-emulated"), r = scratch("fc2-reference");
  REQUIRE(run("train" + kSmall + " --out " + e.string()).code == 0);
  REQUIRE(run("train" + kSmall + " --backend fc2=reference --out " + r.string()).code == 0);
  const std::string me = metrics_without_seconds(e / "metrics.csv"), mr = metrics_without_seconds(r / "metrics.csv");
  // The FP32 run is the same; the FP8 run differs because fc2 ran in FP32.
  CHECK(me.substr(0, me.find("fp8_")) == mr.substr(0, mr.find("fp8_")));
  CHECK(me != mr);
  const Result bad = run("train" + kSmall + " --backend fc9=cuda --out " + scratch("bad").string());
  CHECK(bad.code == 2);
  CHECK(bad.output.find("unknown layer 'fc9' (this model's layers are fc1, fc2, fc3)") != std::string::npos);
  const Result bad_kind = run("train" + kSmall + " --backend fc1=gpu --out " + scratch("bad2").string());
  CHECK(bad_kind.code == 2);
  CHECK(bad_kind.output.find("unknown backend 'gpu'") != std::string::npos);
}

TEST_CASE("train --resident on runs the device-resident step program on the CPU with exactly the host results",
          "[cli][backend][device]") {
  // Every recipe runs device-resident (Mlp::to_device on backend::cpu_device()); checkpoints mid-run,
  // then the files compared.
  const std::string args = " --epochs 2 --train-samples 600 --test-samples 200 --batch-size 64 --quiet --recipe all"
                           " --margin 1 --amax-history-len 4 --checkpoint-every 1";
  const fs::path h = scratch("resident-off"), d = scratch("resident-on");
  const Result rh = run("train" + args + " --resident off --out " + h.string());
  const Result rd = run("train" + args + " --resident on --out " + d.string());
  REQUIRE(rh.code == 0);
  REQUIRE(rd.code == 0);
  CHECK(metrics_without_seconds(h / "metrics.csv") == metrics_without_seconds(d / "metrics.csv"));
  CHECK(slurp(h / "layers.csv") == slurp(d / "layers.csv"));
  CHECK(rd.output.find("is not device-resident") == std::string::npos);  // every recipe is
  CHECK(slurp(d / "summary.json").find("\"resident\": \"on\"") != std::string::npos);
  // GELU, SGD, fp32 accumulation and the BF16 run through the same program.
  const std::string more = " --epochs 1 --train-samples 300 --test-samples 100 --quiet --recipe current"
                           " --activation gelu --optimizer sgd --accumulation fp32 --bf16";
  const fs::path h2 = scratch("resident-off-2"), d2 = scratch("resident-on-2");
  REQUIRE(run("train" + more + " --resident off --out " + h2.string()).code == 0);
  REQUIRE(run("train" + more + " --resident on --out " + d2.string()).code == 0);
  CHECK(metrics_without_seconds(h2 / "metrics.csv") == metrics_without_seconds(d2 / "metrics.csv"));
  CHECK(slurp(h2 / "layers.csv") == slurp(d2 / "layers.csv"));
  CHECK(slurp(h2 / "metrics.csv").find("\nbf16,1,") != std::string::npos);
}

TEST_CASE("train --bf16 adds a BF16 run after FP32 and leaves the others unchanged", "[cli][backend][bf16]") {
  const std::string args = " --epochs 1 --train-samples 600 --test-samples 200 --quiet --recipe delayed";
  const fs::path a = scratch("bf16-on"), b = scratch("bf16-off");
  const Result ra = run("train" + args + " --bf16 --out " + a.string());
  INFO(ra.output);
  REQUIRE(ra.code == 0);
  REQUIRE(run("train" + args + " --out " + b.string()).code == 0);
  const std::string m = metrics_without_seconds(a / "metrics.csv");
  const std::size_t f32 = m.find("\nfp32,"), b16 = m.find("\nbf16,"), f8 = m.find("\nfp8_delayed,");
  REQUIRE(b16 != std::string::npos);
  CHECK(f32 < b16);
  CHECK(b16 < f8);
  std::string without;
  std::stringstream rows(m);
  for (std::string row; std::getline(rows, row);)
    if (row.rfind("bf16,", 0) != 0) without += row + "\n";
  CHECK(without == metrics_without_seconds(b / "metrics.csv"));
  const std::string s = slurp(a / "summary.json");
  CHECK(s.find("\"bf16\": true") != std::string::npos);
  CHECK(slurp(b / "summary.json").find("\"bf16\"") == std::string::npos);  // no key without the flag
  // Its rounding shows: the BF16 run's numbers are not FP32's.
  const std::size_t f32_end = m.find('\n', f32 + 1), b16_end = m.find('\n', b16 + 1);
  CHECK(m.substr(f32 + 5, f32_end - f32 - 5) != m.substr(b16 + 5, b16_end - b16 - 5));
}

TEST_CASE("train --bf16-accumulation and --fp32-accumulation run one run each on a tensor core",
          "[cli][backend][bf16]") {
  const std::string args = " --epochs 1 --train-samples 600 --test-samples 200 --quiet --recipe delayed --bf16";
  const fs::path a = scratch("bf16-tc"), b = scratch("bf16-seq"), c = scratch("bf16-bad");
  const Result ra = run("train" + args + " --bf16-accumulation hopper-bf16 --out " + a.string());
  INFO(ra.output);
  REQUIRE(ra.code == 0);
  REQUIRE(run("train" + args + " --out " + b.string()).code == 0);
  const std::string ma = metrics_without_seconds(a / "metrics.csv"), mb = metrics_without_seconds(b / "metrics.csv");
  auto rows_of = [](const std::string& m, const std::string& run_name) {
    std::string out;
    std::stringstream rows(m);
    for (std::string row; std::getline(rows, row);)
      if (row.rfind(run_name + ",", 0) == 0) out += row + "\n";
    return out;
  };
  CHECK(rows_of(ma, "fp32") == rows_of(mb, "fp32"));
  CHECK(rows_of(ma, "fp8_delayed") == rows_of(mb, "fp8_delayed"));
  CHECK(rows_of(ma, "bf16") != rows_of(mb, "bf16"));  // other sums, other training
  CHECK(slurp(a / "summary.json").find("\"bf16_accumulation\": \"hopper-bf16\"") != std::string::npos);
  CHECK(slurp(b / "summary.json").find("bf16_accumulation") == std::string::npos);  // default: no key
  // --fp32-accumulation: the FP32 run on a tf32 tensor core, the bf16 and FP8 runs unchanged.
  const fs::path t = scratch("fp32-tf32");
  REQUIRE(run("train" + args + " --fp32-accumulation ampere-tf32 --out " + t.string()).code == 0);
  const std::string mt = metrics_without_seconds(t / "metrics.csv");
  CHECK(rows_of(mt, "fp32") != rows_of(mb, "fp32"));
  CHECK(rows_of(mt, "bf16") == rows_of(mb, "bf16"));
  CHECK(rows_of(mt, "fp8_delayed") == rows_of(mb, "fp8_delayed"));
  CHECK(slurp(t / "summary.json").find("\"fp32_accumulation\": \"ampere-tf32\"") != std::string::npos);
  Result rt = run("train" + args + " --fp32-accumulation hopper-bf16 --out " + c.string());
  CHECK(rt.code == 2);
  CHECK(rt.output.find("--fp32-accumulation must be fp32 or a tf32 tensor core (ampere-tf32, ada-tf32, hopper-tf32, "
                       "blackwell-tf32), got 'hopper-bf16'") != std::string::npos);
  const Result rc = run("train" + args + " --bf16-accumulation hopper-fp16 --out " + c.string());
  CHECK(rc.code == 2);
  CHECK(rc.output.find("--bf16-accumulation must be fp32 or a bf16 tensor core (ampere-bf16, ada-bf16, hopper-bf16, "
                       "blackwell-bf16), got 'hopper-fp16'") != std::string::npos);
  // The BF16 run's model without the BF16 run: refused, naming the missing flag.
  const Result rn = run("train --epochs 1 --train-samples 600 --test-samples 200 --quiet --bf16-accumulation "
                        "hopper-bf16 --out " + c.string());
  CHECK(rn.code == 2);
  CHECK(rn.output.find("add --bf16 to train that run") != std::string::npos);
  CHECK(!fs::exists(c));
}

TEST_CASE("train --resident refuses what it cannot do by name, writing nothing", "[cli][backend][errors]") {
  const fs::path d = scratch("resident-bad");
  Result r = run("train" + kSmall + " --resident sometimes --out " + d.string());
  CHECK(r.code == 2);
  CHECK(r.output.find("--resident must be auto, on or off, got 'sometimes'") != std::string::npos);
  r = run("train" + kSmall + " --resident on --dp-shards 2 --out " + d.string());
  CHECK(r.code == 2);
  CHECK(r.output.find("--resident on needs one data-parallel shard") != std::string::npos);
  r = run("train" + kSmall + " --resident on --backend fc1=reference --out " + d.string());
  CHECK(r.code == 2);
  CHECK(r.output.find("--resident on: reference (FP32) layers run on the host") != std::string::npos);
  CHECK(!fs::exists(d));
}
