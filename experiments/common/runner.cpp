// The runner shared by the training experiments (see runner.hpp).
#include "common/runner.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <iomanip>
#include <sstream>
#include <type_traits>
#include <variant>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "fp8emu/backend/select.hpp"
#include "fp8emu/io/atomic_file.hpp"
#include "fp8emu_internal/plot.hpp"
#include "fp8emu_internal/resources.hpp"

namespace fp8emu::experiments::common {

void set_te_accumulation(nn::Linear& layer, emu::Accumulation acc) {
  if (model_of(acc).datapath == Datapath::kTensorCore)  // TE's fast/split wrappers (tensor cores only)
    layer.set_accumulation(emu::te_fprop(acc), emu::te_dgrad(acc), emu::te_wgrad(acc));
  else
    layer.set_accumulation({acc, 0}, {acc, 0}, {acc, 0});
}

std::string fmt_g(double v) {
  if (std::isnan(v)) return "nan";  // one spelling whatever the sign bit (x86 and CUDA NaNs differ in it)
  std::ostringstream os;
  os << std::setprecision(9) << v;
  return os.str();
}

std::string fmt_scale(float s) { return std::isnan(s) ? std::string() : fmt_g(s); }

double frac(std::uint64_t a, std::uint64_t n) { return n ? double(a) / double(n) : 0.0; }

namespace {
std::string timestamp_dir(const std::string& prefix) {
  const std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", std::localtime(&t));
  const std::string base = "results/" + prefix + buf;
  std::string dir = base;
  for (int k = 2; std::filesystem::exists(dir); ++k) dir = base + "-" + std::to_string(k);
  return dir;
}
}  // namespace

ResultsFolder::ResultsFolder(const std::string& out_dir, const std::string& resume,
                             const std::string& timestamp_prefix, std::vector<std::string> result_files)
    : dir_(out_dir), result_files_(std::move(result_files)) {
  if (!resume.empty()) {
    // Not the throwing equivalent(): --out need not exist (and neither need --resume, which is
    // reported later as having no checkpoint).
    std::error_code ec;
    const bool same = dir_.empty() || dir_ == resume || (std::filesystem::equivalent(dir_, resume, ec) && !ec);
    FP8EMU_CHECK(same, "--resume ", resume, " continues in that folder; --out must be omitted or the same folder");
    dir_ = resume;
  }
  if (dir_.empty()) dir_ = timestamp_dir(timestamp_prefix);
}

void ResultsFolder::prepare(bool resuming) const {
  namespace fs = std::filesystem;
  io::ensure_writable_dir(dir_);
  std::error_code ec;
  for (const char* f : {"summary.json", "curves.png"}) fs::remove(fs::path(dir_) / f, ec);
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string n = e.path().filename().string();
    if (n.find(".tmp.") == std::string::npos) continue;
    for (const std::string& f : result_files_)
      if (n.rfind(f, 0) == 0 || n.rfind("." + f, 0) == 0) {
        fs::remove(e.path(), ec);
        break;
      }
  }
  if (!resuming) fs::remove(checkpoint_path());  // a fresh run: an old checkpoint is stale
}

void ResultsFolder::write(const std::string& file, const std::string& text) const {
  io::write_file_atomic(path(file), text);
}

bool ResultsFolder::write_curves(const std::string& header, const std::vector<Panel>& panels) const {
  std::ostringstream s;
  s << header;
  for (const Panel& p : panels) {
    s << p.before << "set title '" << p.title << "'\nplot ";
    for (std::size_t r = 0; r < p.series.size(); ++r)
      s << (r ? ", " : "") << "'-' using 1:2 with linespoints lw 2 title '" << p.series[r].name << "'";
    s << '\n';
    for (const Series& d : p.series) {
      for (std::size_t i = 0; i < d.y.size(); ++i) s << d.x[i] << ' ' << fmt_g(d.y[i]) << '\n';
      s << "e\n";
    }
  }
  s << "unset multiplot\n";
  return io::render_png(s.str(), path("curves.png"));
}

double shortest(float v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::strtod(std::string(buf, r.ptr).c_str(), nullptr);
}

nlohmann::json recipe_parameters_json(const scaling::Recipe& recipe) {
  nlohmann::json j = nlohmann::json::object();
  std::visit(
      [&j](const auto& r) {
        r.visit_parameters([&j](const char* name, const auto& value) {
          if constexpr (std::is_same_v<std::decay_t<decltype(value)>, float>) j[name] = shortest(value);
          else j[name] = value;
        });
      },
      recipe);
  return j;
}

nlohmann::json changed_recipe_parameters(const scaling::RecipeSet& set) {
  nlohmann::json out = nlohmann::json::object();
  const std::vector<scaling::Recipe> mine = set.all(), defaults = scaling::RecipeSet().all();
  for (std::size_t i = 0; i < mine.size(); ++i) {
    const nlohmann::json m = recipe_parameters_json(mine[i]), d = recipe_parameters_json(defaults[i]);
    nlohmann::json diff = nlohmann::json::object();
    for (auto it = m.begin(); it != m.end(); ++it)
      if (!d.contains(it.key()) || d[it.key()] != it.value()) diff[it.key()] = it.value();
    if (!diff.empty()) out[scaling::recipe_name(mine[i])] = diff;
  }
  return out;
}

void record_backends(nlohmann::json& config, const std::string& spec, const std::vector<std::string>& names,
                     bool last_fp32) {
  std::ostringstream quiet;  // the fallback line was printed once when the flags were checked
  std::vector<backend::Kind> used =
      backend::resolve(backend::parse_layer_backends(spec, names, backend::Kind::kEmulated), false, quiet);
  if (last_fp32) used.back() = backend::Kind::kReference;
  config["backend_used"] = backend::describe(used, names);
  if (!quiet.str().empty()) config["backend_fallback"] = backend::cuda_status().why_not();
}

const backend::Device* resident_device(const std::string& mode, const std::vector<backend::Kind>& kinds,
                                       int shards) {
  FP8EMU_CHECK(mode == "auto" || mode == "on" || mode == "off", "--resident must be auto, on or off, got '", mode,
               "'");
  if (mode == "off") return nullptr;
  const bool all_cuda = std::all_of(kinds.begin(), kinds.end(), [](backend::Kind k) { return k == backend::Kind::kCuda; });
  const bool all_emulated =
      std::all_of(kinds.begin(), kinds.end(), [](backend::Kind k) { return k == backend::Kind::kEmulated; });
  if (mode == "auto") return all_cuda && shards == 1 ? &backend::cuda_device() : nullptr;
  FP8EMU_CHECK(shards == 1, "--resident on needs one data-parallel shard, got --dp-shards ", shards);
  const bool any_reference =
      std::any_of(kinds.begin(), kinds.end(), [](backend::Kind k) { return k == backend::Kind::kReference; });
  FP8EMU_CHECK(!any_reference, "--resident on: reference (FP32) layers run on the host; use --resident auto or off "
               "with --backend reference");
  FP8EMU_CHECK(all_cuda || all_emulated, "--resident on needs every layer on one backend, cuda or emulated (after "
               "any fallback), got a mix of the two in --backend");
  return all_cuda ? &backend::cuda_device() : &backend::cpu_device();
}

int set_threads(int threads) {
  // More threads than CPUs only slow the run down (results are the same for any --threads).
  const int cpus = io::usable_cpus();
  FP8EMU_CHECK(threads <= cpus, "--threads ", threads, " is more than the ", cpus,
               " CPU(s) this process may run on (results are the same for any --threads; 0 uses all of them)");
#ifdef _OPENMP
  if (threads > 0) omp_set_num_threads(threads);
  return omp_get_max_threads();
#else
  (void)threads;
  return 1;
#endif
}

std::string json_text(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace fp8emu::experiments::common
