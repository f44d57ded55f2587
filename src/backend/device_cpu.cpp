// backend::cpu_device(): the host-memory Device running the emulator (cpu_device.hpp).
#include "cpu_device.hpp"

namespace fp8emu::backend {

const Device& cpu_device() {
  static const detail::CpuDevice d("cpu");
  return d;
}

}  // namespace fp8emu::backend
