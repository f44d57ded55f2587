/// \file config.hpp
/// \brief Build-wide macros of fp8emu: host/device qualifiers and the version.
///
/// `FP8EMU_HD` marks the integer-only core functions that are shared by the CPU emulator and the
/// CUDA kernels: `__host__ __device__ __forceinline__` under nvcc, plain `inline` otherwise.
/// This header includes nothing else.
#pragma once

#define FP8EMU_VERSION_MAJOR 0
#define FP8EMU_VERSION_MINOR 1
#define FP8EMU_VERSION_PATCH 0
#define FP8EMU_VERSION_STRING "0.1.0"

#if defined(__CUDACC__)
#define FP8EMU_HD __host__ __device__ __forceinline__
#else
#define FP8EMU_HD inline
#endif

/// FP8EMU_HD for the hot conversion routines whose policy arguments are usually constants: always
/// inlined on the host too, so that the compiler folds the policy (the exhaustive oracle sweeps run
/// about 1.3x slower when GCC keeps the general encoder out of line).
#if defined(__CUDACC__)
#define FP8EMU_HD_FLATTEN __host__ __device__ __forceinline__
#elif defined(__GNUC__)
#define FP8EMU_HD_FLATTEN inline __attribute__((always_inline))
#else
#define FP8EMU_HD_FLATTEN inline
#endif
