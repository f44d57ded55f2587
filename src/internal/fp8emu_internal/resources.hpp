/// \file resources.hpp
/// \brief What this process may use: its memory limit and its CPUs. The CLI checks a run's memory
/// need against the limit before it allocates, and --threads against the CPUs, so that arguments
/// the machine cannot serve stop with one line naming the limit instead of a std::bad_alloc, the
/// kernel's OOM killer or a machine thrashing for hours.
#pragma once

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#include "fp8emu/util/error.hpp"

namespace fp8emu::io {

/// A memory limit and what sets it.
struct MemoryLimit {
  std::uint64_t bytes = UINT64_MAX;
  std::string what;  // "this machine's 23.4 GiB of memory", "the address-space limit (ulimit -v) of 1.0 GiB"
};

/// `bytes` in GiB with one decimal ("1.5 GiB"), or MiB below 1 GiB.
inline std::string format_bytes(std::uint64_t bytes) {
  char buf[64];
  if (bytes >= (std::uint64_t(1) << 30)) std::snprintf(buf, sizeof buf, "%.1f GiB", double(bytes) / double(1 << 30));
  else std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / double(1 << 20));
  return buf;
}

/// The smallest of: the machine's physical memory, the control group's memory limit (cgroup v2
/// memory.max or v1 memory.limit_in_bytes), and the process's address-space and data limits
/// (RLIMIT_AS, RLIMIT_DATA: ulimit -v, ulimit -d, prlimit --as/--data). Swap is not counted.
inline MemoryLimit memory_limit() {
  MemoryLimit m;
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) {
    m.bytes = std::uint64_t(pages) * std::uint64_t(page);
    m.what = "this machine's " + format_bytes(m.bytes) + " of memory";
  }
  const auto lower = [&m](std::uint64_t bytes, const std::string& what) {
    if (bytes < m.bytes) m = {bytes, what + " of " + format_bytes(bytes)};
  };
  for (const char* f : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(f);
    unsigned long long v = 0;
    if (in >> v) lower(v, "the control group's memory limit");
  }
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
    lower(rl.rlim_cur, "the address-space limit (ulimit -v)");
  if (::getrlimit(RLIMIT_DATA, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
    lower(rl.rlim_cur, "the data-segment limit (ulimit -d)");
  return m;
}

/// "this machine's 23.4 GiB of memory" or the rlimit that is lower.
inline std::string describe_memory_limit() {
  const MemoryLimit m = memory_limit();
  return m.what.empty() ? std::string("the memory limit is unknown") : "the limit is " + m.what;
}

/// Throws fp8emu::Error "<what> needs at least <need> of memory, more than <limit>" when
/// `need_bytes` (a lower bound of what the work allocates) exceeds memory_limit().
inline void check_memory(std::uint64_t need_bytes, const std::string& what) {
  const MemoryLimit m = memory_limit();
  FP8EMU_CHECK(need_bytes <= m.bytes, what, " needs at least ", format_bytes(need_bytes), " of memory, more than ",
               m.what);
}

/// The CPUs this process may run on (its affinity mask, as nproc counts them); at least 1.
inline int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? int(n) : 1;
}

}  // namespace fp8emu::io
