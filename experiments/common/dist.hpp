// The ranks of a data-parallel job: MPI_COMM_WORLD when this fp8emu was built with MPI and started
// by a launcher (`mpirun -np N fp8emu train ...`), otherwise the one process. The experiments call
// only these functions, never MPI itself, so a build without MPI differs only here.
//
// Collectives move bytes and never combine values: every sum the experiments report or apply is
// computed by them, in a fixed order, from gathered parts (docs/data-parallel.md), so results
// cannot depend on the order in which messages arrive.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "fp8emu/util/error.hpp"

namespace fp8emu::experiments::common::dist {

/// True when this fp8emu was built with MPI (find_package(MPI) found it at configure time).
bool built_with_mpi();

/// What a launcher (Open MPI's mpirun, MPICH's hydra, Slurm's PMI/PMIx) put in this process's
/// environment, read without initialising MPI.
struct LaunchInfo {
  bool launched = false;  ///< Started by a launcher.
  int rank = 0, size = 1;
};
LaunchInfo launch_info();

/// An error every rank of the job raised with the same message (Group::agree): main prints it once,
/// on rank 0, and every rank exits normally.
class CollectiveError : public Error {
 public:
  explicit CollectiveError(const std::string& what) : Error(what) {}
};

/// The ranks of this job. Every collective must be called by every rank, in the same order.
class Group {
 public:
  int rank() const { return rank_; }
  int size() const { return size_; }
  /// The rank among the ranks on this node (MPI_COMM_TYPE_SHARED), for the GPU choice.
  int local_rank() const { return local_rank_; }
  bool root() const { return rank_ == 0; }

  /// Every rank's `bytes` bytes, in rank order (size() * bytes).
  std::vector<std::uint8_t> allgather_bytes(const void* data, std::size_t bytes) const;
  /// Every rank's vector (each rank gives the same count), concatenated in rank order.
  template <class T>
  std::vector<T> allgather(const std::vector<T>& local) const {
    const std::vector<std::uint8_t> b = allgather_bytes(local.data(), local.size() * sizeof(T));
    std::vector<T> out(local.size() * std::size_t(size_));
    if (!b.empty()) std::memcpy(out.data(), b.data(), b.size());
    return out;
  }
  /// Rank `root`'s bytes on every rank (resized to them).
  void broadcast(std::vector<std::uint8_t>& bytes, int root) const;
  /// MPI_Alltoallv of floats: send_counts[q] floats (packed in rank order) go to rank q; recv
  /// receives recv_counts[p] floats from each rank p, in rank order.
  void alltoallv(const float* send, const std::vector<std::size_t>& send_counts, float* recv,
                 const std::vector<std::size_t>& recv_counts) const;
  /// Every rank's counts[rank] floats, concatenated in rank order into recv.
  void allgatherv(const float* send, float* recv, const std::vector<std::size_t>& counts) const;

  /// Runs `f` on every rank; if it throws on any rank, every rank throws CollectiveError with the
  /// message of the lowest failing rank. `f` must not call collectives itself.
  void agree(const std::function<void()>& f) const;
  /// Only rank 0 runs `f` (a file operation); its error, if any, is thrown on every rank.
  void on_root(const std::function<void()>& f) const;

 private:
  friend Group& world();
  int rank_ = 0, size_ = 1, local_rank_ = 0;
};

/// The group of this process: MPI_COMM_WORLD when built with MPI and started by a launcher (MPI is
/// initialised on the first call and finalised at exit), otherwise the process alone.
/// \throws fp8emu::Error when a launcher started several ranks of an fp8emu built without MPI.
Group& world();

/// Runs `f`. In a job of several ranks an exception other than CollectiveError is a failure of
/// this rank alone while the others may wait for it in a collective: it is printed with the rank
/// ("fp8emu <command>: rank r of N: error: ...") and the whole job is aborted (MPI_Abort).
void run_or_abort(const char* command, const std::function<void()>& f);

/// Whether this process prints errors that reach main: rank 0 of a job (read from the launcher's
/// environment when MPI is not initialised), or a process started without a launcher.
bool reports_errors();

/// On rank 0 of a job of several ranks: the line printed when mpirun terminates this rank because
/// another one failed (SIGTERM), e.g. where the last checkpoint is. Empty: no line.
void set_termination_note(const std::string& note);

}  // namespace fp8emu::experiments::common::dist
