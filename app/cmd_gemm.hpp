// `fp8emu gemm`: FP8 GEMM on .npy files with a chosen accumulation model.
#pragma once

#include <ostream>
#include <string>

namespace fp8emu::cli {

struct GemmOptions {
  std::string a, b, out;
  std::string layout = "tn";        ///< tn: A [M, K], B [N, K]; nn: A [M, K], B [K, N]
  std::string format_a = "e4m3", format_b = "e4m3";
  float scale_inv_a = 1.0f, scale_inv_b = 1.0f;  ///< for uint8 (FP8 code) inputs
  std::string accumulation = "hopper";
  int promotion = 0;                ///< 0: fast accumulation
  int split_k = 1;                  ///< cuBLASLt's split-K count (1: no split)
  std::string output = "fp32";      ///< fp32, bf16, fp16, or an FP8 format name (fp8_format_names())
  float d_scale = 1.0f, alpha = 1.0f, beta = 0.0f;
  std::string c, bias;              ///< optional .npy: C [M, N] float32 (with beta), bias [N] float32
};

/// D = A B^T (tn) or A B (nn) with the chosen accumulation; float32 inputs are quantized with
/// current scaling first. Writes D as float32 .npy. \return 0, or 2 with a message on bad input.
int run_gemm(const GemmOptions& o, std::ostream& out, std::ostream& err);

}  // namespace fp8emu::cli
