// `fp8emu train-lm` end to end on a small generated corpus: outputs, determinism across thread
// counts, SIGKILL + resume bit-identical, and every bad-input error (nothing written).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "support/cli_runner.hpp"
#include "support/result_files.hpp"
#include "support/idx_writer.hpp"

namespace fs = std::filesystem;

namespace {
using fp8emu::testing::slurp;
std::string without_seconds(const fs::path& p) { return fp8emu::testing::csv_without_seconds(p); }
using Result = fp8emu::testing::CliResult;
Result run(const std::string& args) { return fp8emu::testing::run_cli(args); }

fs::path scratch(const std::string& name) { return fp8emu::testing::scratch_dir("fp8emu-lm", name); }

fs::path corpus() { return fp8emu::testing::word_salad_corpus("lm"); }

const std::string kShape = " --heads 2 --layers 1 --ffn 32 --seq-len 16 --batch-size 4 --eval-batches 2 --sample-chars 20 --quiet";
const std::string kTiny = " --d-model 16 --steps 12 --eval-every 4" + kShape;

std::string tiny(int steps = 12, int eval_every = 4) {
  return "train-lm --text " + corpus().string() + " --d-model 16 --steps " + std::to_string(steps) + " --eval-every " +
         std::to_string(eval_every) + kShape;
}

pid_t spawn(const std::string& cmdline) {
  const pid_t pid = fork();
  if (pid == 0) {
    std::freopen("/dev/null", "w", stdout);
    std::freopen("/dev/null", "w", stderr);
    execl("/bin/sh", "sh", "-c", ("exec " + std::string(FP8EMU_CLI_PATH) + " " + cmdline).c_str(), (char*)nullptr);
    _exit(127);
  }
  return pid;
}
}  // namespace

TEST_CASE("train-lm writes metrics, layers, samples, summary for FP32 and FP8", "[cli][lm]") {
  const fs::path out = scratch("smoke");
  const Result r = run(tiny() + " --out " + out.string());
  INFO(r.output);
  REQUIRE(r.code == 0);
  const std::string m = slurp(out / "metrics.csv");
  CHECK(m.rfind("run,step,train_loss,val_loss,val_perplexity,seconds\n", 0) == 0);
  CHECK(m.find("fp32,12,") != std::string::npos);
  CHECK(m.find("fp8_delayed,12,") != std::string::npos);
  const std::string l = slurp(out / "layers.csv");
  CHECK(l.find("fp8_delayed,12,l0.qkv,") != std::string::npos);
  CHECK(l.find("fp8_delayed,12,head,") != std::string::npos);
  const nlohmann::json j = nlohmann::json::parse(slurp(out / "summary.json"));
  CHECK(j["runs"]["fp32"]["val_loss"].get<double>() > 0.0);
  CHECK(j["runs"]["fp8_delayed"]["val_loss"].get<double>() > 0.0);
  CHECK(j.contains("fp8_vs_fp32_val_loss_percent"));
  CHECK(j["runs"]["fp8_delayed"]["sample"].get<std::string>().size() == 20);
  CHECK(slurp(out / "samples.txt").find("=== fp8_delayed") != std::string::npos);
  // An FP8 layer differs from its FP32 twin, but not by much; the FP32 head has no FP8 error.
  std::stringstream rows(l);
  std::string row;
  bool saw_fp8_error = false;
  while (std::getline(rows, row)) {
    if (row.rfind("fp8_delayed,12,l0.fc1,", 0) == 0) {
      const double e = std::stod(row.substr(std::string("fp8_delayed,12,l0.fc1,").size()));
      saw_fp8_error = e > 0.0 && e < 0.2;
    }
    if (row.rfind("fp8_delayed,12,head,", 0) == 0) CHECK(row.find(",head,0,") != std::string::npos);
  }
  CHECK(saw_fp8_error);
}

TEST_CASE("train-lm: bit-identical results with 1 and 2 threads, other recipes run", "[cli][lm][determinism]") {
  const fs::path a = scratch("t1"), b = scratch("t2");
  REQUIRE(run(tiny() + " --threads 1 --out " + a.string()).code == 0);
  REQUIRE(run(tiny() + " --threads 2 --out " + b.string()).code == 0);
  CHECK(without_seconds(a / "metrics.csv") == without_seconds(b / "metrics.csv"));
  CHECK(slurp(a / "layers.csv") == slurp(b / "layers.csv"));
  const fs::path c = scratch("all");
  const Result r = run(tiny() + " --recipe all --norm rmsnorm --mlp-activation swiglu --activation-dtype bf16 --out " +
                       c.string());
  INFO(r.output);
  REQUIRE(r.code == 0);
  for (const char* run_name : {"fp8_delayed,", "fp8_current,", "fp8_mxfp8,", "fp8_block,"})
    CHECK(slurp(c / "metrics.csv").find(run_name) != std::string::npos);
}

TEST_CASE("train-lm on text that is not UTF-8 still writes a valid summary.json", "[cli][lm]") {
  // Latin-1 bytes (0xE9, 0xFC) are not valid UTF-8 on their own; samples drawn from such a corpus
  // must not break summary.json (samples.txt keeps the raw bytes).
  const fs::path text = fs::temp_directory_path() / ("fp8emu-lm-latin1-" + std::to_string(::getpid()) + ".txt");
  {
    std::ofstream f(text, std::ios::binary);
    for (int i = 0; i < 3000; ++i) f << "caf\xe9 m\xfcsli \xe9t\xe9\n";
  }
  const fs::path out = scratch("latin1");
  const Result r = run("train-lm --text " + text.string() + " --d-model 16 --steps 8 --eval-every 4" + kShape +
                       " --out " + out.string());
  INFO(r.output);
  REQUIRE(r.code == 0);
  const nlohmann::json j = nlohmann::json::parse(slurp(out / "summary.json"));
  CHECK(j["runs"]["fp32"]["sample"].get<std::string>().size() >= 20);
  CHECK(slurp(out / "samples.txt").find('\xe9') != std::string::npos);
  CHECK(j["config"]["backend_used"].get<std::string>().find("head=reference") != std::string::npos);
}

TEST_CASE("train-lm per-layer recipe and accumulation change only the FP8 run", "[cli][lm]") {
  const fs::path a = scratch("plain"), b = scratch("per-layer");
  REQUIRE(run(tiny() + " --out " + a.string()).code == 0);
  const Result r = run(tiny() + " --layer-recipe l0.fc1=current,l0.fc2=block --layer-accumulation l0.qkv=fp32 --out " +
                       b.string());
  INFO(r.output);
  REQUIRE(r.code == 0);
  const std::string ma = without_seconds(a / "metrics.csv"), mb = without_seconds(b / "metrics.csv");
  CHECK(ma.substr(0, ma.find("fp8_")) == mb.substr(0, mb.find("fp8_")));  // FP32 identical
  CHECK(ma != mb);
  // block scaling has per-block scales: no per-tensor scale is reported for l0.fc2.
  CHECK(slurp(b / "layers.csv").find("fp8_delayed,12,l0.fc2,") != std::string::npos);
  const nlohmann::json j = nlohmann::json::parse(slurp(b / "summary.json"));
  CHECK(j["config"]["layer_recipe"] == "l0.fc1=current,l0.fc2=block");
}

TEST_CASE("train-lm takes every recipe parameter train takes, recorded when changed", "[cli][lm]") {
  const fs::path a = scratch("recipe-default"), b = scratch("recipe-margin");
  REQUIRE(run(tiny() + " --out " + a.string()).code == 0);
  const Result r = run(tiny() + " --margin 2 --amax-history-len 4 --amax-compute-algo most_recent --out " + b.string());
  INFO(r.output);
  REQUIRE(r.code == 0);
  const std::string ma = without_seconds(a / "metrics.csv"), mb = without_seconds(b / "metrics.csv");
  CHECK(ma.substr(0, ma.find("fp8_")) == mb.substr(0, mb.find("fp8_")));  // FP32 identical
  CHECK(ma != mb);                                                        // the recipe changed the FP8 run
  const nlohmann::json ja = nlohmann::json::parse(slurp(a / "summary.json"));
  const nlohmann::json jb = nlohmann::json::parse(slurp(b / "summary.json"));
  CHECK_FALSE(ja["config"].contains("recipes"));  // TE's defaults: nothing recorded, as before these flags
  CHECK(jb["config"]["recipes"]["delayed"]["margin"] == 2);
  CHECK(jb["config"]["recipes"]["delayed"]["amax_history_len"] == 4);
  CHECK(jb["config"]["recipes"]["delayed"]["amax_compute_algo"] == "most_recent");
  CHECK(jb["config"]["recipes"].size() == 1);
  // A named value that is not one gives one line naming the flag.
  const Result bad = run(tiny() + " --amax-compute-algo median --out " + scratch("recipe-bad").string());
  CHECK(bad.code == 2);
  CHECK(bad.output.find("--amax-compute-algo") != std::string::npos);
  // A block recipe takes a model for each scale block's partial.
  const fs::path c = scratch("block-hopper");
  const Result rc = run(tiny() + " --recipe block --layer-accumulation l0.fc1=hopper --out " + c.string());
  INFO(rc.output);
  CHECK(rc.code == 0);
  CHECK(fs::exists(c / "summary.json"));
}

TEST_CASE("train-lm killed with SIGKILL and resumed ends bit-identical", "[cli][lm][checkpoint]") {
  const std::string flags = tiny(300, 50) + " --recipe all";
  const fs::path ref = scratch("ck-ref"), out = scratch("ck-run");
  REQUIRE(run(flags + " --out " + ref.string()).code == 0);
  const pid_t pid = spawn(flags + " --checkpoint-every 3 --out " + out.string());
  for (int i = 0; i < 1200; ++i) {  // kill once an FP8 run has checkpointed
    if (fs::exists(out / "checkpoint.bin") && slurp(out / "metrics.csv").find("fp8_") != std::string::npos) break;
    usleep(20000);
  }
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFSIGNALED(status));  // killed mid-way, not finished
  CHECK(!fs::exists(out / "summary.json"));
  const Result r = run(flags + " --checkpoint-every 3 --resume " + out.string());
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(without_seconds(out / "metrics.csv") == without_seconds(ref / "metrics.csv"));
  CHECK(slurp(out / "layers.csv") == slurp(ref / "layers.csv"));
  CHECK(slurp(out / "samples.txt") == slurp(ref / "samples.txt"));
}

TEST_CASE("train-lm: bad corpus, flags and checkpoints give clear errors and write nothing", "[cli][lm][errors]") {
  const fs::path out = scratch("bad");
  const fs::path empty = fs::temp_directory_path() / ("fp8emu-lm-empty-" + std::to_string(::getpid()) + ".txt");
  std::ofstream(empty).close();
  const fs::path shortf = fs::temp_directory_path() / ("fp8emu-lm-short-" + std::to_string(::getpid()) + ".txt");
  std::ofstream(shortf) << "too short";
  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases{
      {"train-lm --text /nonexistent/corpus" + kTiny, "no such text file or folder"},
      {"train-lm --text " + empty.string() + kTiny, "the corpus is empty"},
      {"train-lm --text " + shortf.string() + kTiny, "the corpus is too short"},
      {"train-lm --text " + corpus().string() + " --d-model 15" + kShape, "must be a multiple of --heads"},
      {tiny() + " --recipe fp4", "unknown recipe 'fp4'"},
      {tiny() + " --norm batchnorm", "unknown --norm 'batchnorm'"},
      {tiny() + " --backend l7.qkv=cuda", "unknown layer 'l7.qkv'"},
      {tiny() + " --layer-recipe l0.fc9=current", "--layer-recipe: unknown layer 'l0.fc9'"},
      {tiny() + " --layer-recipe l0.fc1=fp4", "unknown recipe 'fp4'"},
      {tiny() + " --layer-accumulation l0.fc1=fp64", "unknown accumulation model 'fp64'"},
  };
  for (const Case& c : cases) {
    const Result r = run(c.args + " --out " + out.string());
    INFO(c.args << "\n" << r.output);
    CHECK(r.code == 2);
    CHECK(r.output.find(c.message) != std::string::npos);
    CHECK(!fs::exists(out));
  }
  // Checkpoints: a flipped byte, other flags, nothing to resume.
  const fs::path ck = scratch("ck-bad");
  REQUIRE(run(tiny() + " --checkpoint-every 4 --out " + ck.string()).code == 0);
  Result r = run(tiny(13) + " --resume " + ck.string());
  CHECK(r.code == 2);
  CHECK(r.output.find("written with different flags or data") != std::string::npos);
  std::vector<std::uint8_t> bytes = fp8emu::testing::read_all((ck / "checkpoint.bin").string());
  REQUIRE(bytes.size() > 100);
  bytes[bytes.size() / 2] ^= 0x40;
  fp8emu::testing::write_plain((ck / "checkpoint.bin").string(), bytes);
  r = run(tiny() + " --resume " + ck.string());
  CHECK(r.code == 2);
  CHECK(r.output.find("corrupt checkpoint (checksum mismatch)") != std::string::npos);
  CHECK(fs::exists(ck / "summary.json"));  // a failed resume loses nothing
  r = run(tiny() + " --resume " + scratch("nothing").string());
  CHECK(r.code == 2);
  CHECK(r.output.find("no checkpoint to resume from") != std::string::npos);
}

// Found by the checkpoint fuzzer (scripts/fuzz 600, fuzz_checkpoint, 2026-12-01): a checksummed file
// whose magic is the train-lm family's with a newline for the version put that newline, raw, into
// the error message, which then ran over two lines. The magic is now quoted with escapes; the
// mismatch messages quote the stored configuration the same way.
TEST_CASE("train-lm --resume: a checkpoint magic with a newline gives one escaped line", "[cli][lm][checkpoint][errors]") {
  const fs::path ck = scratch("ck-magic-newline");
  fs::create_directories(ck);
  // The fuzzer's input without its selector byte: string length 22, the magic, then three bytes.
  const std::string magic = "FP8EMU-LM-CHECKPOINT-\n";
  std::vector<std::uint8_t> b{22, 0, 0, 0, 0, 0, 0, 0};
  b.insert(b.end(), magic.begin(), magic.end());
  b.insert(b.end(), {0, 0, 0, 0, 0, 0, 0, 0x21, 0});
  const std::uint32_t crc = std::uint32_t(crc32(0L, b.data(), uInt(b.size())));
  for (int i = 0; i < 4; ++i) b.push_back(std::uint8_t(crc >> (8 * i)));
  fp8emu::testing::write_plain((ck / "checkpoint.bin").string(), b);
  const Result r = run(tiny() + " --resume " + ck.string());
  INFO(r.output);
  CHECK(r.code != 0);
  CHECK(r.output.find("written by another fp8emu version (format FP8EMU-LM-CHECKPOINT-\\n; this one reads "
                      "FP8EMU-LM-CHECKPOINT-4)") != std::string::npos);
  CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
}

TEST_CASE("train-lm --resident on runs the device-resident step program on the CPU with exactly the host results",
          "[cli][lm][device]") {
  // Every recipe (with the FP8 head; current scaling with SwiGLU, RMSNorm, bf16 activations) runs as
  // DeviceCharLm on backend::cpu_device(); checkpoints and evaluations bring the host copy up to
  // date mid-run.
  const std::string base = tiny(12, 4) + " --checkpoint-every 6";
  for (const std::string& extra :
       {std::string(" --recipe all --fp8-head"),
        std::string(" --recipe current --norm rmsnorm --mlp-activation swiglu --activation-dtype bf16 --fp8-head"),
        std::string(" --recipe delayed --bf16")}) {
    INFO(extra);
    const fs::path h = scratch("resident-off"), d = scratch("resident-on");
    const Result rh = run(base + extra + " --resident off --out " + h.string());
    const Result rd = run(base + extra + " --resident on --out " + d.string());
    REQUIRE(rh.code == 0);
    REQUIRE(rd.code == 0);
    CHECK(without_seconds(h / "metrics.csv") == without_seconds(d / "metrics.csv"));
    CHECK(slurp(h / "layers.csv") == slurp(d / "layers.csv"));
    CHECK(slurp(h / "samples.txt") == slurp(d / "samples.txt"));
    CHECK(rd.output.find("is not device-resident") == std::string::npos);  // every recipe is
  }
  const Result bad = run(tiny() + " --resident on --dp-shards 2 --out " + scratch("resident-bad").string());
  CHECK(bad.code == 2);
  CHECK(bad.output.find("--resident on needs one data-parallel shard") != std::string::npos);
}

TEST_CASE("train-lm --bf16 adds a BF16 run between FP32 and FP8, with its error against the FP32 twin",
          "[cli][lm][bf16]") {
  const fs::path out = scratch("bf16"), plain = scratch("bf16-off");
  const Result r = run(tiny() + " --bf16 --out " + out.string());
  INFO(r.output);
  REQUIRE(r.code == 0);
  const Result p = run(tiny() + " --out " + plain.string());
  REQUIRE(p.code == 0);
  const std::string m = slurp(out / "metrics.csv");
  const std::size_t f32 = m.find("fp32,12,"), b16 = m.find("bf16,12,"), f8 = m.find("fp8_delayed,12,");
  REQUIRE(b16 != std::string::npos);
  CHECK(f32 < b16);
  CHECK(b16 < f8);
  // The other runs are unchanged by the extra one (same seeds and batches).
  std::string m_without;
  std::stringstream rows(without_seconds(out / "metrics.csv"));
  for (std::string row; std::getline(rows, row);)
    if (row.rfind("bf16,", 0) != 0) m_without += row + "\n";
  CHECK(m_without == without_seconds(plain / "metrics.csv"));
  const nlohmann::json j = nlohmann::json::parse(slurp(out / "summary.json"));
  const double v32 = j["runs"]["fp32"]["val_loss"].get<double>(), v16 = j["runs"]["bf16"]["val_loss"].get<double>();
  CHECK(v16 > 0.0);
  CHECK(v16 != v32);  // bf16 rounding changes the losses, a little
  CHECK(std::abs(v16 / v32 - 1.0) < 0.05);
  CHECK(j.contains("fp8_vs_bf16_val_loss_percent"));
  CHECK(j["config"]["bf16"].get<bool>());
  // Every BF16 layer, the head included, differs from its FP32 twin by about bf16's precision.
  std::stringstream lrows(slurp(out / "layers.csv"));
  int layers = 0;
  for (std::string row; std::getline(lrows, row);) {
    if (row.rfind("bf16,12,", 0) != 0) continue;
    const std::string rest = row.substr(std::string("bf16,12,").size());
    const double e = std::stod(rest.substr(rest.find(',') + 1));
    INFO(row);
    CHECK(e > 1e-4);
    CHECK(e < 2e-2);
    ++layers;
  }
  CHECK(layers == 5);  // l0.qkv, l0.proj, l0.fc1, l0.fc2, head
}
