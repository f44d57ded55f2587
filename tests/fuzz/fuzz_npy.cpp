// libFuzzer target: the .npy reader (io::read_npy) on arbitrary bytes. A file it accepts must hold
// exactly product(shape) * itemsize data bytes of a supported dtype, and survive a write/read
// round trip unchanged.
#include <cstdint>
#include <string>

#include "fp8emu/io/npy.hpp"
#include "fp8emu/util/error.hpp"
#include "fuzz_input.hpp"

using namespace fp8emu;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static fuzz::InputFile in("npy");
  static const std::string round_trip = fuzz::scratch_dir() + "/round-trip.npy";
  in.set(data, size);
  io::NpyArray a;
  try {
    a = io::read_npy(in.path());
  } catch (const Error& e) {
    fuzz::require_one_line(e.what());
    return 0;
  }
  fuzz::require(a.itemsize() != 0, "accepted an unsupported dtype");
  fuzz::require(a.data.size() == a.count() * a.itemsize(), "data size does not match the shape");
  io::write_npy(round_trip, a);
  const io::NpyArray b = io::read_npy(round_trip);
  fuzz::require(b.dtype == a.dtype && b.shape == a.shape && b.data == a.data, "write/read round trip changed it");
  return 0;
}
