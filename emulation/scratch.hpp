// Private: scratch buffers that outlive one kernel call. The GEMMs keep their packed operands and
// tile states in thread_local vectors (one set per calling thread, so concurrent GEMMs on several
// threads never share one) that only grow: a training step's many small GEMMs then make no
// allocation, zero fill or fresh-page faults. Each call rewrites every entry it reads, so nothing
// carries over from one call to the next; buffers above kKeepScratchBytes are released after the
// call that needed them.
#pragma once

#include <cstddef>
#include <vector>

namespace fp8emu::emu::detail {

inline constexpr std::size_t kKeepScratchBytes = std::size_t(64) << 20;

/// v's storage with at least n elements (grown, never shrunk; contents unspecified).
template <class T>
T* grow(std::vector<T>& v, std::size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

/// Releases v when it holds more than kKeepScratchBytes.
template <class T>
void trim(std::vector<T>& v) {
  if (v.capacity() * sizeof(T) > kKeepScratchBytes) std::vector<T>().swap(v);
}

}  // namespace fp8emu::emu::detail
