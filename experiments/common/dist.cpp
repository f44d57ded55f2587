// The ranks of a data-parallel job (see dist.hpp). Built with FP8EMU_HAVE_MPI when CMake found MPI.
#include "common/dist.hpp"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>

#ifdef FP8EMU_HAVE_MPI
#include <mpi.h>
#endif

namespace fp8emu::experiments::common::dist {
namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  return (*end || x < 0 || x > INT_MAX) ? fallback : int(x);
}

bool g_mpi = false;  // MPI initialised by world()

// The SIGTERM note (set_termination_note): written by the handler with write(2), which is
// async-signal-safe.
char g_note[2048];
std::size_t g_note_len = 0;
extern "C" void on_sigterm(int) {
  if (g_note_len) {
    ssize_t ignored = ::write(2, g_note, g_note_len);
    (void)ignored;
  }
  ::_exit(128 + SIGTERM);
}

#ifdef FP8EMU_HAVE_MPI
int count_of(std::size_t n, const char* what) {
  FP8EMU_CHECK(n <= std::size_t(INT_MAX), "data-parallel ", what, " of ", n,
               " elements exceeds MPI's int counts; use fewer parameters per rank");
  return int(n);
}

void finalize_mpi() {
  int done = 0;
  MPI_Finalized(&done);
  if (!done) MPI_Finalize();
}
#endif

}  // namespace

bool built_with_mpi() {
#ifdef FP8EMU_HAVE_MPI
  return true;
#else
  return false;
#endif
}

LaunchInfo launch_info() {
  LaunchInfo l;
  // Open MPI's mpirun, then MPICH's hydra (and Slurm's srun --mpi=pmi2).
  const char* pairs[][2] = {{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}, {"PMI_RANK", "PMI_SIZE"}};
  for (const auto& p : pairs) {
    if (!std::getenv(p[0])) continue;
    l.launched = true;
    l.rank = env_int(p[0], 0);
    l.size = env_int(p[1], 1);
    break;
  }
  return l;
}

Group& world() {
  static Group g = [] {
    Group w;
    const LaunchInfo l = launch_info();
#ifdef FP8EMU_HAVE_MPI
    if (l.launched) {
      int provided = 0;
      // OpenMP threads compute; only the main thread calls MPI.
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
      g_mpi = true;
      std::atexit(finalize_mpi);
      MPI_Comm_rank(MPI_COMM_WORLD, &w.rank_);
      MPI_Comm_size(MPI_COMM_WORLD, &w.size_);
      MPI_Comm node;
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w.rank_, MPI_INFO_NULL, &node);
      MPI_Comm_rank(node, &w.local_rank_);
      MPI_Comm_free(&node);
    }
#else
    FP8EMU_CHECK(!l.launched || l.size <= 1, "this fp8emu was built without MPI (CMake found no MPI at configure "
                 "time), so it cannot be one of the ", l.size, " ranks that mpirun started: install libopenmpi-dev "
                 "and openmpi-bin (scripts/setup does), reconfigure and rebuild; or run it without mpirun");
#endif
    return w;
  }();
  return g;
}

std::vector<std::uint8_t> Group::allgather_bytes(const void* data, std::size_t bytes) const {
  std::vector<std::uint8_t> out(bytes * std::size_t(size_));
  if (size_ == 1) {
    if (bytes) std::memcpy(out.data(), data, bytes);
    return out;
  }
#ifdef FP8EMU_HAVE_MPI
  const int n = count_of(bytes, "gather");
  MPI_Allgather(data, n, MPI_BYTE, out.data(), n, MPI_BYTE, MPI_COMM_WORLD);
#endif
  return out;
}

void Group::broadcast(std::vector<std::uint8_t>& bytes, int root) const {
  if (size_ == 1) return;
#ifdef FP8EMU_HAVE_MPI
  std::uint64_t n = bytes.size();
  MPI_Bcast(&n, 1, MPI_UINT64_T, root, MPI_COMM_WORLD);
  bytes.resize(std::size_t(n));
  MPI_Bcast(bytes.data(), count_of(std::size_t(n), "broadcast"), MPI_BYTE, root, MPI_COMM_WORLD);
#else
  (void)bytes;
  (void)root;
#endif
}

void Group::alltoallv(const float* send, const std::vector<std::size_t>& send_counts, float* recv,
                      const std::vector<std::size_t>& recv_counts) const {
  FP8EMU_CHECK(send_counts.size() == std::size_t(size_) && recv_counts.size() == std::size_t(size_),
               "alltoallv: one count per rank expected");
  if (size_ == 1) {
    std::memcpy(recv, send, send_counts[0] * sizeof(float));
    return;
  }
#ifdef FP8EMU_HAVE_MPI
  const std::size_t n = static_cast<std::size_t>(size_);
  std::vector<int> sc(n), sd(n), rc(n), rd(n);
  std::size_t so = 0, ro = 0;
  for (std::size_t q = 0; q < n; ++q) {
    sc[q] = count_of(send_counts[q], "exchange");
    sd[q] = count_of(so, "exchange");
    rc[q] = count_of(recv_counts[q], "exchange");
    rd[q] = count_of(ro, "exchange");
    so += send_counts[q];
    ro += recv_counts[q];
  }
  MPI_Alltoallv(send, sc.data(), sd.data(), MPI_FLOAT, recv, rc.data(), rd.data(), MPI_FLOAT, MPI_COMM_WORLD);
#endif
}

void Group::allgatherv(const float* send, float* recv, const std::vector<std::size_t>& counts) const {
  FP8EMU_CHECK(counts.size() == std::size_t(size_), "allgatherv: one count per rank expected");
  if (size_ == 1) {
    if (recv != send) std::memcpy(recv, send, counts[0] * sizeof(float));
    return;
  }
#ifdef FP8EMU_HAVE_MPI
  const std::size_t n = static_cast<std::size_t>(size_);
  std::vector<int> c(n), d(n);
  std::size_t o = 0;
  for (std::size_t q = 0; q < n; ++q) {
    c[q] = count_of(counts[q], "gather");
    d[q] = count_of(o, "gather");
    o += counts[q];
  }
  MPI_Allgatherv(send, c[std::size_t(rank_)], MPI_FLOAT, recv, c.data(), d.data(), MPI_FLOAT, MPI_COMM_WORLD);
#endif
}

void Group::agree(const std::function<void()>& f) const {
  std::exception_ptr failure;
  std::string message;
  try {
    f();
  } catch (const std::exception& e) {
    failure = std::current_exception();
    message = e.what();
  }
  if (size_ == 1) {
    if (failure) std::rethrow_exception(failure);
    return;
  }
  const std::vector<int> failed = allgather(std::vector<int>{failure ? 1 : 0});
  for (int r = 0; r < size_; ++r) {
    if (!failed[std::size_t(r)]) continue;
    std::vector<std::uint8_t> text(message.begin(), message.end());
    broadcast(text, r);
    throw CollectiveError(std::string(text.begin(), text.end()));
  }
}

void Group::on_root(const std::function<void()>& f) const {
  agree([&] {
    if (root()) f();
  });
}

void run_or_abort(const char* command, const std::function<void()>& f) {
  const Group& g = world();
  if (g.size() == 1) {
    f();
    return;
  }
  try {
    f();
  } catch (const CollectiveError&) {
    throw;  // every rank has it: main prints it once
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fp8emu %s: rank %d of %d: error: %s (aborting all ranks)\n", command, g.rank(), g.size(),
                 e.what());
    std::fflush(stderr);
#ifdef FP8EMU_HAVE_MPI
    MPI_Abort(MPI_COMM_WORLD, 1);
#endif
    std::_Exit(1);
  }
}

bool reports_errors() {
#ifdef FP8EMU_HAVE_MPI
  if (g_mpi) return world().root();
#endif
  return launch_info().rank == 0;
}

void set_termination_note(const std::string& note) {
  const Group& g = world();
  if (g.size() == 1 || !g.root()) return;
  g_note_len = std::min(note.size(), sizeof g_note);
  std::memcpy(g_note, note.data(), g_note_len);
  std::signal(SIGTERM, g_note_len ? on_sigterm : SIG_DFL);
}

}  // namespace fp8emu::experiments::common::dist
