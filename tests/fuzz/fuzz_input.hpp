// Shared by the libFuzzer targets: the fuzzer's bytes as a file that fp8emu's path-based readers
// can open (an in-memory file, /proc/self/fd/N, rewritten for every input), and the rule that bad
// input may only end in fp8emu::Error: any other exception escapes LLVMFuzzerTestOneInput, which
// libFuzzer reports as a crash.
#pragma once

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace fp8emu::fuzz {

/// An in-memory file (memfd) holding the current input. path() stays the same across inputs.
class InputFile {
 public:
  explicit InputFile(const char* name) : fd_(::memfd_create(name, 0)) {
    if (fd_ < 0) {
      std::perror("memfd_create");
      std::abort();
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  const std::string& path() const { return path_; }
  void set(const std::uint8_t* data, std::size_t size) {
    if (::ftruncate(fd_, 0) != 0) std::abort();
    std::size_t done = 0;
    while (done < size) {
      const ssize_t w = ::pwrite(fd_, data + done, size - done, off_t(done));
      if (w <= 0) std::abort();
      done += std::size_t(w);
    }
  }

 private:
  int fd_;
  std::string path_;
};

/// A scratch folder for files a target writes or needs under a given name: /dev/shm (no disk
/// writes, fsync is free) when it exists, else /tmp; one per process.
/// Removed when the fuzzer exits normally (libFuzzer calls exit() at the end of its run).
inline const std::string& scratch_dir() {
  // Never destroyed (a pointer), so that the exit handler may still read it.
  static const std::string* const dir = [] {
    const std::string base = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    const auto* d = new std::string(base + "/fp8emu-fuzz-" + std::to_string(::getpid()));
    ::mkdir(d->c_str(), 0700);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch_dir(), ec);
    });
    return d;
  }();
  return *dir;
}

/// Stops the fuzzer on a broken invariant (reported as a crash, with the message).
inline void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fp8emu fuzz: invariant broken: %s\n", what);
    std::abort();
  }
}

/// An error message for bad input: one line (whatever bytes the input held), of bounded length.
inline void require_one_line(const std::string& message) {
  require(!message.empty(), "empty error message");
  require(message.find('\n') == std::string::npos, "error message of several lines");
  require(message.size() < 4096, "error message longer than 4096 bytes");
}

}  // namespace fp8emu::fuzz
