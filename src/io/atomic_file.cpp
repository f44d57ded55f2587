// Atomic result files (see include/fp8emu/io/atomic_file.hpp).
#include "fp8emu/io/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "fp8emu/util/error.hpp"

namespace fp8emu::io {

void write_file_atomic(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  FP8EMU_CHECK(fd >= 0, "cannot write ", path, ": ", std::strerror(errno));
  std::size_t done = 0;
  while (done < content.size()) {
    const ssize_t w = ::write(fd, content.data() + done, content.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      FP8EMU_FAIL("cannot write ", path, ": ", std::strerror(e));
    }
    done += std::size_t(w);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    FP8EMU_FAIL("cannot write ", path, ": ", std::strerror(e));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    FP8EMU_FAIL("cannot write ", path, ": ", std::strerror(e));
  }
}

void ensure_writable_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  FP8EMU_CHECK(!ec, "output folder ", dir, " cannot be created: ", ec.message());
  FP8EMU_CHECK(std::filesystem::is_directory(dir), "output folder ", dir, " is not a folder");
  const std::string probe = dir + "/.fp8emu-write-test." + std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  FP8EMU_CHECK(fd >= 0, "output folder ", dir, " is not writable: ", std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

}  // namespace fp8emu::io
