// Data-parallel training over MPI end to end (CTest label `mpi`; built when CMake found MPI):
// `mpirun -np N fp8emu train|train-lm --dp-shards S` gives the same bits for N = 1, 2 and 4, keeps
// the ranks' parameters identical, reduces delayed scaling's amax over the chosen group, survives a
// killed rank with an intact checkpoint that resumes at another N, and rejects bad flags with one
// error line. The machine may have fewer cores than ranks: mpirun oversubscribes, one thread each.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "support/cli_runner.hpp"
#include "support/result_files.hpp"

namespace fs = std::filesystem;

namespace {
using fp8emu::testing::slurp;
using Result = fp8emu::testing::CliResult;

fs::path scratch(const std::string& name) { return fp8emu::testing::scratch_dir("fp8emu-mpi", name); }

// The launcher's arguments before the program: Open MPI needs --oversubscribe to start more ranks
// than cores, --allow-run-as-root as root (CI), and shared memory only (no network in a container).
std::vector<std::string> launcher(int ranks) {
  std::vector<std::string> a{FP8EMU_MPIEXEC, FP8EMU_MPIEXEC_NUMPROC_FLAG, std::to_string(ranks)};
#ifdef FP8EMU_MPIEXEC_OPENMPI
  for (const char* f : {"--oversubscribe", "--mca", "btl", "self,vader", "--bind-to", "none"}) a.push_back(f);
  if (::geteuid() == 0) a.push_back("--allow-run-as-root");
#endif
  a.push_back(FP8EMU_CLI_PATH);
  return a;
}

Result mpirun(int ranks, const std::string& args) {
  std::string cmd;
  for (const std::string& a : launcher(ranks)) cmd += a + " ";
  return fp8emu::testing::run_shell(cmd + args);
}

Result plain(const std::string& args) { return fp8emu::testing::run_cli(args); }

std::string without_seconds(const fs::path& p) { return fp8emu::testing::csv_without_seconds(p); }

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The shards.csv rows of one run, as {epoch/step, layer} -> the shards' "input,weight,grad_output".
std::map<std::string, std::vector<std::string>> shard_scales(const fs::path& csv, const std::string& run) {
  std::map<std::string, std::vector<std::string>> m;
  std::stringstream in(slurp(csv));
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::stringstream ls(line);
    std::string x;
    while (std::getline(ls, x, ',')) f.push_back(x);
    if (f.size() != 7 || f[0] != run) continue;
    m[f[1] + "/" + f[2]].push_back(f[4] + "," + f[5] + "," + f[6]);
  }
  return m;
}

fs::path corpus() { return fp8emu::testing::word_salad_corpus("mpi"); }

const std::string kData = FP8EMU_DEFAULT_DATA_DIR;
const std::string kTrain =
    "train --epochs 2 --train-samples 600 --test-samples 250 --batch-size 60 --hidden 32 --threads 1 --quiet";
std::string lm(int steps = 12) {
  return "train-lm --text " + corpus().string() + " --steps " + std::to_string(steps) +
         " --batch-size 4 --seq-len 16 --d-model 16 --heads 2 --layers 1 --ffn 32 --eval-every 6 --eval-batches 3 "
         "--sample-chars 20 --threads 1 --quiet";
}
}  // namespace

TEST_CASE("mpi: train gives bit-identical results on 1, 2 and 4 ranks (every recipe)", "[mpi]") {
  REQUIRE(fs::exists(kData + "/train-images-idx3-ubyte.gz"));
  const std::string flags = kTrain + " --recipe all --dp-shards 4";
  const fs::path ref = scratch("train-ref"), one_shard = scratch("train-s1");
  const Result r = plain(flags + " --out " + ref.string());
  INFO(r.output);
  REQUIRE(r.code == 0);
  // The shards change the arithmetic (so this compares something): one shard gives other bits.
  REQUIRE(plain(kTrain + " --recipe all --out " + one_shard.string()).code == 0);
  CHECK(without_seconds(one_shard / "metrics.csv") != without_seconds(ref / "metrics.csv"));
  for (int ranks : {1, 2, 4}) {
    const fs::path out = scratch("train-n" + std::to_string(ranks));
    const Result m = mpirun(ranks, flags + " --out " + out.string());
    INFO("ranks " << ranks << "\n" << m.output);
    REQUIRE(m.code == 0);
    CHECK(without_seconds(out / "metrics.csv") == without_seconds(ref / "metrics.csv"));
    CHECK(slurp(out / "layers.csv") == slurp(ref / "layers.csv"));
    CHECK(slurp(out / "shards.csv") == slurp(ref / "shards.csv"));
    const nlohmann::json s = nlohmann::json::parse(slurp(out / "summary.json"));
    CHECK(s["config"]["data_parallel"]["ranks"] == ranks);
    CHECK(s["config"]["data_parallel"]["dp_shards"] == 4);
    for (const auto& run : s["runs"].items())
      CHECK(run.value()["data_parallel"]["parameters_identical_across_ranks"] == true);
  }
  CHECK(!slurp(ref / "shards.csv").empty());
}

TEST_CASE("mpi: train-lm gives bit-identical results on 1, 2 and 4 ranks (every recipe)", "[mpi][lm]") {
  const std::string flags = lm() + " --recipe all --dp-shards 4";
  const fs::path ref = scratch("lm-ref");
  const Result r = plain(flags + " --out " + ref.string());
  INFO(r.output);
  REQUIRE(r.code == 0);
  for (int ranks : {1, 2, 4}) {
    const fs::path out = scratch("lm-n" + std::to_string(ranks));
    const Result m = mpirun(ranks, flags + " --out " + out.string());
    INFO("ranks " << ranks << "\n" << m.output);
    REQUIRE(m.code == 0);
    CHECK(without_seconds(out / "metrics.csv") == without_seconds(ref / "metrics.csv"));
    CHECK(slurp(out / "layers.csv") == slurp(ref / "layers.csv"));
    CHECK(slurp(out / "shards.csv") == slurp(ref / "shards.csv"));
    CHECK(slurp(out / "samples.txt") == slurp(ref / "samples.txt"));
    const nlohmann::json s = nlohmann::json::parse(slurp(out / "summary.json"));
    for (const auto& run : s["runs"].items())
      CHECK(run.value()["data_parallel"]["parameters_identical_across_ranks"] == true);
  }
}

TEST_CASE("mpi: --amax-reduction dp gives every shard one scale, none and group=2 do not", "[mpi][amax]") {
  REQUIRE(fs::exists(kData + "/train-images-idx3-ubyte.gz"));
  const std::string flags = kTrain + " --recipe delayed --dp-shards 4";
  std::map<std::string, fs::path> out;
  for (const char* red : {"dp", "none", "group=2"}) {
    out[red] = scratch(std::string("amax-") + (red[0] == 'g' ? "group2" : red));
    const Result m = mpirun(2, flags + " --amax-reduction " + red + " --out " + out[red].string());
    INFO(red << "\n" << m.output);
    REQUIRE(m.code == 0);
  }
  // dp: every shard holds the same scales after every epoch.
  const auto dp = shard_scales(out["dp"] / "shards.csv", "fp8_delayed");
  REQUIRE(dp.size() == 2 * 2);  // 2 epochs x 2 layers
  for (const auto& [key, shards] : dp) {
    REQUIRE(shards.size() == 4);
    for (const std::string& s : shards) CHECK(s == shards[0]);
  }
  // none: each shard keeps its own amax, so the grad_output scales part (the weights stay shared:
  // the gradient all-reduce keeps the parameters identical, which the summary confirms).
  const auto none = shard_scales(out["none"] / "shards.csv", "fp8_delayed");
  bool none_differs = false;
  for (const auto& [key, shards] : none)
    for (const std::string& s : shards) none_differs |= s != shards[0];
  CHECK(none_differs);
  // group=2: shards {0, 1} and {2, 3} agree within their group, and the groups differ.
  const auto g2 = shard_scales(out["group=2"] / "shards.csv", "fp8_delayed");
  bool groups_differ = false;
  for (const auto& [key, shards] : g2) {
    REQUIRE(shards.size() == 4);
    CHECK(shards[0] == shards[1]);
    CHECK(shards[2] == shards[3]);
    groups_differ |= shards[0] != shards[2];
  }
  CHECK(groups_differ);
  // The group changes the training: the metrics differ from dp's; the summary reports the spread.
  CHECK(without_seconds(out["none"] / "metrics.csv") != without_seconds(out["dp"] / "metrics.csv"));
  const nlohmann::json sd = nlohmann::json::parse(slurp(out["dp"] / "summary.json"));
  const nlohmann::json sn = nlohmann::json::parse(slurp(out["none"] / "summary.json"));
  CHECK(sd["runs"]["fp8_delayed"]["data_parallel"]["max_scale_ratio_across_shards"] == 1.0);
  CHECK(sn["runs"]["fp8_delayed"]["data_parallel"]["max_scale_ratio_across_shards"].get<double>() > 1.0);
  CHECK(sn["runs"]["fp8_delayed"]["data_parallel"]["parameters_identical_across_ranks"] == true);
  // The same group on one process (four shards in a row) gives the same bits.
  const fs::path single = scratch("amax-none-1");
  REQUIRE(plain(flags + " --amax-reduction none --out " + single.string()).code == 0);
  CHECK(slurp(single / "shards.csv") == slurp(out["none"] / "shards.csv"));
  CHECK(without_seconds(single / "metrics.csv") == without_seconds(out["none"] / "metrics.csv"));
}

namespace {
// mpirun -np `ranks` in the background, its output in `log`.
pid_t spawn_mpirun(int ranks, const std::string& args, const fs::path& log) {
  std::vector<std::string> argv_s = launcher(ranks);
  std::stringstream in(args);
  for (std::string a; in >> a;) argv_s.push_back(a);
  const pid_t pid = fork();
  if (pid == 0) {
    std::vector<char*> argv;
    for (std::string& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::freopen(log.c_str(), "w", stdout);
    dup2(fileno(stdout), 2);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

// The process of rank `rank` among mpirun's children (found by its environment), or -1.
pid_t rank_process(pid_t mpirun_pid, int rank) {
  const std::string want = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank);
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::stringstream stat(slurp(e.path() / "stat"));
    std::string pid, comm, state, ppid;
    stat >> pid >> comm >> state >> ppid;
    if (ppid != std::to_string(mpirun_pid)) continue;
    std::string env = slurp(e.path() / "environ");
    for (char& c : env)
      if (c == '\0') c = '\n';
    if (("\n" + env).find("\n" + want + "\n") != std::string::npos) return pid_t(std::stol(name));
  }
  return -1;
}
}  // namespace

namespace {
// Runs `flags --out out` on 2 ranks, kills rank 1 with SIGKILL once rank 0 wrote a checkpoint, and
// checks that mpirun failed, named the killed rank and printed rank 0's note; then resumes on
// `resume_ranks` and returns that run's result.
Result kill_and_resume(const std::string& flags, const fs::path& out, int resume_ranks) {
  const fs::path log = scratch("kill-log-" + out.filename().string());
  fs::create_directories(log);
  const pid_t mp = spawn_mpirun(2, flags + " --out " + out.string(), log / "mpirun.txt");
  REQUIRE(mp > 0);
  for (int i = 0; i < 3000 && !fs::exists(out / "checkpoint.bin"); ++i) usleep(10000);
  REQUIRE(fs::exists(out / "checkpoint.bin"));
  const pid_t victim = rank_process(mp, 1);
  REQUIRE(victim > 0);
  REQUIRE(!fs::exists(out / "summary.json"));  // the run is still going
  kill(victim, SIGKILL);
  int status = 0;
  waitpid(mp, &status, 0);
  const std::string text = slurp(log / "mpirun.txt");
  INFO(text);
  CHECK(!(WIFEXITED(status) && WEXITSTATUS(status) == 0));  // the job failed
  CHECK(text.find("signal 9") != std::string::npos);       // mpirun names the killed rank
  CHECK(text.find("the last checkpoint is intact: continue with --resume " + out.string()) != std::string::npos);
  CHECK(!fs::exists(out / "summary.json"));
  return resume_ranks == 1 ? plain(flags + " --resume " + out.string())
                           : mpirun(resume_ranks, flags + " --resume " + out.string());
}
}  // namespace

TEST_CASE("mpi: train: a rank killed mid-run fails the job clearly, the checkpoint resumes on 4 ranks",
          "[mpi][checkpoint]") {
  REQUIRE(fs::exists(kData + "/train-images-idx3-ubyte.gz"));
  const std::string flags =
      "train --epochs 12 --train-samples 1200 --test-samples 250 --batch-size 60 --hidden 32 --threads 1 --quiet "
      "--recipe delayed --dp-shards 4 --amax-reduction none --checkpoint-every 1";
  const fs::path ref = scratch("kill-ref"), out = scratch("kill-run");
  REQUIRE(plain(flags + " --out " + ref.string()).code == 0);
  // The checkpoint (written atomically by rank 0) resumes on 4 ranks, bit-identical to the
  // uninterrupted run on one process.
  const Result r = kill_and_resume(flags, out, 4);
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(without_seconds(out / "metrics.csv") == without_seconds(ref / "metrics.csv"));
  CHECK(slurp(out / "layers.csv") == slurp(ref / "layers.csv"));
  CHECK(slurp(out / "shards.csv") == slurp(ref / "shards.csv"));
}

TEST_CASE("mpi: train-lm: a rank killed mid-run, the checkpoint resumes on 1 rank bit-identically",
          "[mpi][lm][checkpoint]") {
  const std::string flags = lm(150) + " --recipe delayed --dp-shards 4 --amax-reduction none --checkpoint-every 5";
  const fs::path ref = scratch("lm-kill-ref"), out = scratch("lm-kill-run");
  REQUIRE(plain(flags + " --out " + ref.string()).code == 0);
  const Result r = kill_and_resume(flags, out, 1);
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(without_seconds(out / "metrics.csv") == without_seconds(ref / "metrics.csv"));
  CHECK(slurp(out / "layers.csv") == slurp(ref / "layers.csv"));
  CHECK(slurp(out / "shards.csv") == slurp(ref / "shards.csv"));
  CHECK(slurp(out / "samples.txt") == slurp(ref / "samples.txt"));
}

TEST_CASE("mpi: bad data-parallel flags give one clear error and write nothing", "[mpi][errors]") {
  struct Case {
    int ranks;
    std::string flags, message;
  };
  const std::vector<Case> cases{
      {3, "--dp-shards 4", "--dp-shards 4 is not a multiple of the 3 ranks that mpirun started"},
      {2, "", "--dp-shards 1 is not a multiple of the 2 ranks that mpirun started"},
      {2, "--dp-shards 4 --amax-reduction group=3", "--amax-reduction group=3: the group size must divide --dp-shards 4"},
      {2, "--dp-shards 4 --amax-reduction group=x", "unknown --amax-reduction 'group=x'"},
      {2, "--dp-shards 120", "--dp-shards 120 exceeds the batch of 60 images"},
  };
  for (const Case& c : cases) {
    const fs::path out = scratch("bad");
    const Result r = mpirun(c.ranks, kTrain + " " + c.flags + " --out " + out.string());
    INFO(c.flags << "\n" << r.output);
    CHECK(r.code != 0);
    CHECK(count(r.output, c.message) == 1);         // rank 0 alone prints it
    CHECK(count(r.output, "fp8emu: error:") == 1);  // and nothing else of ours
    CHECK(!fs::exists(out));
  }
  const Result bad_lm = mpirun(2, lm() + " --dp-shards 8 --out " + scratch("bad-lm").string());
  CHECK(bad_lm.code != 0);
  CHECK(count(bad_lm.output, "--dp-shards 8 exceeds --batch-size 4") == 1);
}

TEST_CASE("mpi: with --backend cuda every rank gives the emulator's bits", "[mpi][gpu]") {
  if (plain("doctor").output.find("cuda       yes") == std::string::npos) {
    std::puts("SKIPPED: no usable GPU");
    return;
  }
  const std::string flags = kTrain + " --recipe delayed --dp-shards 2";
  const fs::path emulated = scratch("gpu-emu"), cuda = scratch("gpu-cuda");
  REQUIRE(plain(flags + " --out " + emulated.string()).code == 0);
  const Result r = mpirun(2, flags + " --backend cuda --strict --out " + cuda.string());
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(without_seconds(cuda / "metrics.csv") == without_seconds(emulated / "metrics.csv"));
  CHECK(slurp(cuda / "layers.csv") == slurp(emulated / "layers.csv"));
}
