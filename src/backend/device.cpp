// backend::cuda_device() (see include/fp8emu/backend/device.hpp): the GPU device of the CUDA library
// where the cuda backend can run, otherwise fp8emu::Error with the reason; the shared argument checks.
// cpu_device() is defined in device_cpu.cpp, element_device() in device_element.cpp.
#include "fp8emu/backend/device.hpp"

#include <atomic>

#include "fp8emu/backend/select.hpp"
#include "fp8emu/emulation/quantize.hpp"
#include "fp8emu/util/error.hpp"

#if defined(FP8EMU_HAVE_CUDA)
#include "fp8emu/cuda/backend.hpp"
#endif

namespace fp8emu::backend {

void check_cast_transpose(int rows, int cols, Format fmt, const std::uint8_t* q_rowwise,
                          const std::uint8_t* q_columnwise) {
  emu::require_fp8(fmt, "cast_transpose");
  FP8EMU_CHECK(rows >= 0 && cols >= 0, "cast_transpose: negative shape [", rows, ", ", cols, "]");
  FP8EMU_CHECK(q_rowwise || q_columnwise, "cast_transpose: both the row-wise and the column-wise output are null");
}

void check_block_cast(const BlockCast& c, int rows, int cols, const BlockView& rowwise, const BlockView& columnwise) {
  FP8EMU_CHECK(rowwise.codes || columnwise.codes,
               "block cast: no view asked for (row-wise and column-wise codes both null)");
  FP8EMU_CHECK(c.block >= 1, c.what(), ": block size must be >= 1, got ", c.block);
  FP8EMU_CHECK(rows >= 0 && cols >= 0, c.what(), ": negative shape");
  emu::require_block_element(c.fmt, c.what());
  FP8EMU_CHECK(!c.tiles || c.scale != BlockScaleFormat::kE8M0, "block cast: ", c.block, " x ", c.block,
               " tiles take fp32 or E4M3 scales (E8M0 tiles are no recipe's)");
  FP8EMU_CHECK(c.scale != BlockScaleFormat::kE4M3 || ((!rowwise.codes || rowwise.amax) &&
                                                      (!columnwise.codes || columnwise.amax)),
               c.what(), ": a view of E4M3 block scales needs its amax slot (the tensor scale's amax)");
  FP8EMU_CHECK(!c.rht_columnwise || !c.tiles, c.what(), ": the Hadamard transform applies to 1 x ", c.block,
               " blocks, not to ", c.block, " x ", c.block, " tiles");
  FP8EMU_CHECK(!c.stochastic_rounding || (c.fmt == Format::kE2M1 && c.block == 16 && !c.tiles), c.what(),
               ": stochastic rounding is TE's for E2M1 elements in 1 x 16 blocks");
}

#if defined(FP8EMU_HAVE_CUDA)
void set_library_gemms(bool on) { cuda::set_library_gemms(on); }
bool library_gemms() { return cuda::library_gemms(); }
unsigned long long library_gemm_fallbacks() { return cuda::library_gemm_fallbacks(); }
#else
namespace {
std::atomic<bool> library_flag{false};  // without CUDA: remembered, nothing reads it
}  // namespace
void set_library_gemms(bool on) { library_flag.store(on); }
bool library_gemms() { return library_flag.load(); }
unsigned long long library_gemm_fallbacks() { return 0; }
#endif

const Device& cuda_device() {
  const CudaStatus& s = cuda_status();
  FP8EMU_CHECK(s.usable(), "the cuda backend cannot run: ", s.why_not());
#if defined(FP8EMU_HAVE_CUDA)
  return cuda::device();
#else
  FP8EMU_FAIL("this fp8emu was built without CUDA");  // unreachable: usable() is false
#endif
}

}  // namespace fp8emu::backend
