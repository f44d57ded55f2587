// Private to cuda/device_ops.cu (included there once, inside its anonymous namespace): the kernels
// of backend::cuda_device()'s operations. Each maps threads onto the element functions of
// include/fp8emu/core that the host device calls (one thread per element, row, column, slot or
// output element), so the order of every fp32 sum is the element function's; the fp32 GEMM's
// shared-memory tiles leave each element's order of additions unchanged.
#pragma once

// ---- kernels -------------------------------------------------------------------------------------

// emu::gemm_f32_nn: D [M, N] = A [M, K] * B [K, N]. A block of kG x kG threads owns a kG x kG tile of
// D, one element per thread; A and B pass through shared memory kG values of k at a time. Each thread
// adds its products in increasing k, starting from +0: c = RN(c + RN(a[i, k] * b[k, j])). Only the
// kn valid k of the last tile are added (no padding terms).
constexpr int kG = 16;
__global__ void gemm_f32_nn_kernel(int M, int N, int K, const float* __restrict__ A, const float* __restrict__ B,
                                   float* __restrict__ D) {
  __shared__ float as[kG][kG + 1];  // as[row][k]
  __shared__ float bs[kG][kG + 1];  // bs[k][col]
  const int tx = int(threadIdx.x), ty = int(threadIdx.y);
  for (int by = int(blockIdx.y); by * kG < M; by += int(gridDim.y)) {    // uniform in the block
    for (int bx = int(blockIdx.x); bx * kG < N; bx += int(gridDim.x)) {  // uniform in the block
      const int i = by * kG + ty, j = bx * kG + tx;
      float c = 0.0f;
      for (int k0 = 0; k0 < K; k0 += kG) {
        const int kn = core::min_int(kG, K - k0);
        as[ty][tx] = i < M && tx < kn ? A[std::size_t(i) * std::size_t(K) + std::size_t(k0 + tx)] : 0.0f;
        bs[ty][tx] = ty < kn && j < N ? B[std::size_t(k0 + ty) * std::size_t(N) + std::size_t(j)] : 0.0f;
        __syncthreads();
        for (int kk = 0; kk < kn; ++kk) c = core::add_rn(c, core::mul_rn(as[ty][kk], bs[kk][tx]));
        __syncthreads();
      }
      if (i < M && j < N) D[std::size_t(i) * std::size_t(N) + std::size_t(j)] = c;
    }
  }
}

// emu::gemm_tc_nn: D [M, N] = A [M, K] * B [K, N] (fp32 bits of values of the datapath's operand
// format), one thread per element of D running core::mma_dot over A's row i and B's column j (stride
// N) from C = +0: the host's chain of blocks, element for element.
__global__ void gemm_tc_nn_kernel(int M, int N, int K, const std::uint32_t* __restrict__ A,
                                  const std::uint32_t* __restrict__ B, core::MmaDatapath p, float* __restrict__ D) {
  for (int i = int(blockIdx.y * blockDim.y + threadIdx.y); i < M; i += int(gridDim.y * blockDim.y))
    for (int j = int(blockIdx.x * blockDim.x + threadIdx.x); j < N; j += int(gridDim.x * blockDim.x))
      D[std::size_t(i) * std::size_t(N) + std::size_t(j)] = core::bits_to_f32(
          core::mma_dot(core::MmaValues{A + std::size_t(i) * std::size_t(K), 1}, core::MmaValues{B + j, N}, K, 0u, p));
}

// After a cast into the zeroed scratch totals t: *amax = fmaxf(*amax, max |x|) (as emu::quantize's
// amax; fmaxf ignores a NaN side) and the counters add this cast's counts, count = n.
__global__ void finish_cast_kernel(const CastTotals* __restrict__ t, unsigned long long n, float* amax,
                                   CastCounters* counters) {
  if (amax) *amax = fmaxf(*amax, core::bits_to_f32(t->amax_bits));
  if (counters) {
    counters->count += n;
    counters->saturated += t->saturated;
    counters->underflow += t->underflow;
    counters->nan += t->nan;
  }
}

// Current scaling's scale from the amax bits of the amax kernel (TE compute_scale_from_amax).
__global__ void current_scale_kernel(const unsigned int* __restrict__ amax_bits, float fp8_max, bool pow2,
                                     float epsilon, float* __restrict__ scale) {
  *scale = core::compute_scale_from_amax(core::bits_to_f32(*amax_bits), fp8_max, pow2, epsilon, FLT_MAX);
}

// The fused delayed-scaling update: one thread per slot (each slot owns its history column and scale).
__global__ void delayed_update_kernel(float* history, float* scale, int num_slots, int history_len,
                                      float scaled_max, bool most_recent) {
  const int stride = int(gridDim.x * blockDim.x);
  for (int j = int(blockIdx.x * blockDim.x + threadIdx.x); j < num_slots; j += stride)
    core::delayed_update_slot_fused(history, num_slots, history_len, j, scale, scaled_max, most_recent);
}

// y[i, j] = RN(y[i, j] + b[j]).
__global__ void bias_add_kernel(float* __restrict__ y, const float* __restrict__ b, std::size_t n, int cols) {
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = core::add_rn(y[i], b[i % std::size_t(cols)]);
}

// One thread per column (consecutive threads read consecutive columns of a row: coalesced).
__global__ void column_sum_kernel(const float* __restrict__ x, int rows, int cols, float* __restrict__ out) {
  const int stride = int(gridDim.x * blockDim.x);
  for (int j = int(blockIdx.x * blockDim.x + threadIdx.x); j < cols; j += stride)
    out[j] = core::column_sum(x, rows, cols, j);
}

// y may equal x (each thread reads its element before writing it): no __restrict__.
__global__ void activation_forward_kernel(ActivationOp act, const float* x, float* y, std::size_t n) {
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = act == ActivationOp::kReLU ? core::relu_forward(x[i]) : core::gelu_tanh_forward(x[i]);
}

// dx[i] = RN(dx[i] * act'(pre[i])).
__global__ void activation_backward_kernel(ActivationOp act, const float* __restrict__ pre, float* __restrict__ dx,
                                           std::size_t n) {
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float g = act == ActivationOp::kReLU ? core::relu_grad(pre[i]) : core::gelu_tanh_grad(pre[i]);
    dx[i] = core::mul_rn(dx[i], g);
  }
}

// One thread per row: the row's loss term and (d non-null) its gradient row.
__global__ void softmax_xent_kernel(const float* __restrict__ logits, const std::uint8_t* __restrict__ labels,
                                    int rows, int classes, float divisor, float* __restrict__ loss,
                                    float* __restrict__ dlogits) {
  const int stride = int(gridDim.x * blockDim.x);
  for (int i = int(blockIdx.x * blockDim.x + threadIdx.x); i < rows; i += stride) {
    const std::size_t at = std::size_t(i) * std::size_t(classes);
    loss[i] = core::softmax_xent_row(logits + at, classes, int(labels[i]), divisor, dlogits ? dlogits + at : nullptr);
  }
}

__global__ void adam_kernel(float* __restrict__ w, const float* __restrict__ g, float* __restrict__ m,
                            float* __restrict__ v, std::size_t n, AdamStep s) {
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    core::adam_element(w[i], g[i], m[i], v[i], s.b1, s.b2, s.step, s.sqrt_bc2, s.eps);
}

__global__ void sgd_kernel(float* __restrict__ w, const float* __restrict__ g, float* __restrict__ m, std::size_t n,
                           float momentum, float lr) {
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    core::sgd_momentum_element(w[i], g[i], m[i], momentum, lr);
}

// The two scale_inv of a cuBLASLt FP8 GEMM from the casts' scales: RN(1 / s), as emu::scale_inv_of.
__global__ void scale_inv_pair_kernel(const float* scale_a, const float* scale_b, float* out) {
  out[0] = core::div_rn(1.0f, *scale_a);
  out[1] = core::div_rn(1.0f, *scale_b);
}

// ---- kernels of a transformer step ---------------------------------------------------------------

// Grid-stride loop over [0, n).
#define FP8EMU_FOR_EACH(i, n)                                                                    \
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x, stride_ = std::size_t(gridDim.x) * blockDim.x; \
       i < (n); i += stride_)

// out may be a or b (each thread reads its elements before writing): no __restrict__.
__global__ void add_kernel(const float* a, const float* b, float* out, std::size_t n) {
  FP8EMU_FOR_EACH(i, n) out[i] = core::add_rn(a[i], b[i]);
}

__global__ void round_bf16_kernel(float* x, std::size_t n) {
  FP8EMU_FOR_EACH(i, n)
  x[i] = core::bits_to_f32(core::bf16_to_f32_bits(core::f32_bits_to_bf16_rne(core::f32_to_bits(x[i]))));
}

__global__ void round_tf32_kernel(float* x, std::size_t n) {
  FP8EMU_FOR_EACH(i, n) x[i] = core::bits_to_f32(core::f32_bits_to_tf32_rna(core::f32_to_bits(x[i])));
}

// out[r, j] = the MXFP8 scale of in[r, j / repeat] (Device::block_scales_to_mxfp8), one thread each.
__global__ void block_scales_to_mxfp8_kernel(const float* __restrict__ in, int out_blocks, int repeat,
                                             float* __restrict__ out, std::size_t n) {
  const std::size_t in_blocks = (std::size_t(out_blocks) + repeat - 1) / repeat;
  FP8EMU_FOR_EACH(i, n) {
    const std::size_t r = i / std::size_t(out_blocks), j = i % std::size_t(out_blocks);
    out[i] = core::bits_to_f32(core::mxfp8_scale_from_block_scale_inv_bits(core::f32_to_bits(in[r * in_blocks + j / repeat])));
  }
}

// bf16 bits of fp32 values (RNE; exact for values round_bf16 left): the library bf16 GEMM's operands.
__global__ void to_bf16_bits_kernel(const float* __restrict__ x, std::uint16_t* __restrict__ out, std::size_t n) {
  FP8EMU_FOR_EACH(i, n) out[i] = core::f32_bits_to_bf16_rne(core::f32_to_bits(x[i]));
}

// One thread per row (the row's statistics are sums in column order).
__global__ void norm_forward_kernel(bool layernorm, const float* x, int rows, int cols, const float* __restrict__ gamma,
                                    const float* __restrict__ beta, float eps, bool zero_centered, float* y,
                                    float* __restrict__ xhat, float* __restrict__ rsigma) {
  FP8EMU_FOR_EACH(i, std::size_t(rows)) {
    const std::size_t o = i * std::size_t(cols);
    rsigma[i] = core::norm_forward_row(x + o, cols, layernorm, eps, gamma, beta, zero_centered, y + o, xhat + o);
  }
}

// One thread per column: the parameter gradients, sums over rows in row order.
__global__ void norm_param_grad_kernel(bool layernorm, const float* __restrict__ dy, const float* __restrict__ xhat,
                                       int rows, int cols, float* __restrict__ grad_gamma,
                                       float* __restrict__ grad_beta) {
  FP8EMU_FOR_EACH(j, std::size_t(cols)) {
    float g = 0.0f, b = 0.0f;
    core::norm_param_grad_column(dy, xhat, rows, cols, int(j), g, b);
    grad_gamma[j] = g;
    grad_beta[j] = layernorm ? b : 0.0f;
  }
}

// One thread per row.
__global__ void norm_backward_kernel(bool layernorm, const float* __restrict__ dy, const float* __restrict__ xhat,
                                     const float* __restrict__ rsigma, int rows, int cols,
                                     const float* __restrict__ gamma, bool zero_centered, float* __restrict__ dx) {
  FP8EMU_FOR_EACH(i, std::size_t(rows)) {
    const std::size_t o = i * std::size_t(cols);
    core::norm_backward_row(dy + o, xhat + o, rsigma[i], cols, layernorm, gamma, zero_centered, dx + o);
  }
}

// One thread per element of act [rows, ffn]; h is [rows, ffn] (GELU) or [rows, 2 ffn] (SwiGLU).
__global__ void mlp_act_forward_kernel(bool swiglu, const float* __restrict__ h, int rows, int ffn,
                                       float* __restrict__ act) {
  const std::size_t w = swiglu ? 2 * std::size_t(ffn) : std::size_t(ffn);
  FP8EMU_FOR_EACH(e, std::size_t(rows) * std::size_t(ffn)) {
    const std::size_t i = e / std::size_t(ffn), j = e % std::size_t(ffn);
    const float* hr = h + i * w;
    act[e] = swiglu ? core::swiglu_forward(hr[j], hr[std::size_t(ffn) + j]) : core::gelu_tanh_forward(hr[j]);
  }
}

__global__ void mlp_act_backward_kernel(bool swiglu, const float* __restrict__ h, const float* __restrict__ da,
                                        int rows, int ffn, float* __restrict__ dh) {
  const std::size_t w = swiglu ? 2 * std::size_t(ffn) : std::size_t(ffn);
  FP8EMU_FOR_EACH(e, std::size_t(rows) * std::size_t(ffn)) {
    const std::size_t i = e / std::size_t(ffn), j = e % std::size_t(ffn);
    const float* hr = h + i * w;
    float* dhr = dh + i * w;
    if (swiglu) core::swiglu_backward(hr[j], hr[std::size_t(ffn) + j], da[e], dhr[j], dhr[std::size_t(ffn) + j]);
    else dhr[j] = core::mul_rn(da[e], core::gelu_tanh_grad(hr[j]));
  }
}

// One thread per (sequence b, head h, query row i): the row's probabilities and output.
__global__ void attention_forward_kernel(const float* __restrict__ qkv, int B, int T, int H, int d, float scale,
                                         bool causal, float* __restrict__ out, float* __restrict__ probs) {
  const std::size_t D = std::size_t(H) * std::size_t(d), ld = 3 * D;
  FP8EMU_FOR_EACH(e, std::size_t(B) * std::size_t(H) * std::size_t(T)) {
    const std::size_t i = e % std::size_t(T), bh = e / std::size_t(T), h = bh % std::size_t(H),
                      b = bh / std::size_t(H);
    const float* base = qkv + b * std::size_t(T) * ld + h * std::size_t(d);
    core::attention_row_forward(base + i * ld, base + D, base + 2 * D, int(ld), int(i), T, d, scale, causal,
                                probs + e * std::size_t(T), out + (b * std::size_t(T) + i) * D + h * std::size_t(d));
  }
}

// One thread per (b, h, query row i): ds row and dq row.
__global__ void attention_backward_q_kernel(const float* __restrict__ qkv, const float* __restrict__ probs,
                                            const float* __restrict__ dout, int B, int T, int H, int d, float scale,
                                            bool causal, float* __restrict__ ds, float* dqkv) {
  const std::size_t D = std::size_t(H) * std::size_t(d), ld = 3 * D;
  FP8EMU_FOR_EACH(e, std::size_t(B) * std::size_t(H) * std::size_t(T)) {
    const std::size_t i = e % std::size_t(T), bh = e / std::size_t(T), h = bh % std::size_t(H),
                      b = bh / std::size_t(H);
    const std::size_t row0 = b * std::size_t(T), hd = h * std::size_t(d);
    const float* q0 = qkv + row0 * ld + hd;
    core::attention_row_backward_q(probs + e * std::size_t(T), dout + (row0 + i) * D + hd, q0 + D, q0 + 2 * D,
                                   int(ld), int(i), T, d, scale, causal, ds + e * std::size_t(T),
                                   dqkv + (row0 + i) * ld + hd);
  }
}

// One thread per (b, h, key row j): dK and dV rows, after every ds row of the sequence and head.
__global__ void attention_backward_kv_kernel(const float* __restrict__ qkv, const float* __restrict__ probs,
                                             const float* __restrict__ dout, int B, int T, int H, int d, bool causal,
                                             const float* __restrict__ ds, float* dqkv) {
  const std::size_t D = std::size_t(H) * std::size_t(d), ld = 3 * D, TT = std::size_t(T) * std::size_t(T);
  FP8EMU_FOR_EACH(e, std::size_t(B) * std::size_t(H) * std::size_t(T)) {
    const std::size_t j = e % std::size_t(T), bh = e / std::size_t(T), h = bh % std::size_t(H),
                      b = bh / std::size_t(H);
    const std::size_t row0 = b * std::size_t(T), hd = h * std::size_t(d);
    float* dk = dqkv + (row0 + j) * ld + D + hd;
    core::attention_col_backward_kv(ds + bh * TT, probs + bh * TT, T, qkv + row0 * ld + hd, int(ld), dout + row0 * D + hd,
                                    int(D), int(j), T, d, causal, dk, dk + D);
  }
}

// One thread per element of x [rows, D].
__global__ void embed_forward_kernel(const std::uint8_t* __restrict__ tokens, int rows, int T,
                                     const float* __restrict__ tok, const float* __restrict__ pos, int D,
                                     float* __restrict__ x) {
  FP8EMU_FOR_EACH(e, std::size_t(rows) * std::size_t(D)) {
    const std::size_t r = e / std::size_t(D), c = e % std::size_t(D);
    x[e] = core::add_rn(tok[std::size_t(tokens[r]) * std::size_t(D) + c], pos[(r % std::size_t(T)) * std::size_t(D) + c]);
  }
}

// One thread per column c: the rows added in row order into the (zeroed) gradients (a column is only
// touched by its own thread).
__global__ void embed_backward_kernel(const std::uint8_t* __restrict__ tokens, int rows, int T,
                                      const float* __restrict__ dx, int D, float* __restrict__ grad_tok,
                                      float* __restrict__ grad_pos) {
  FP8EMU_FOR_EACH(c, std::size_t(D)) {
    for (int r = 0; r < rows; ++r) {
      const float g = dx[std::size_t(r) * std::size_t(D) + c];
      float* gt = grad_tok + std::size_t(tokens[r]) * std::size_t(D) + c;
      float* gp = grad_pos + std::size_t(r % T) * std::size_t(D) + c;
      *gt = core::add_rn(*gt, g);
      *gp = core::add_rn(*gp, g);
    }
  }
}

// emu::spread_tile_scales on the device: the per-tile scale_inv [ceil(rows/tile), ceil(cols/tile)]
// spread over the row-wise view's blocks [rows, tc] and the column-wise view's [cols, tr].
__global__ void spread_tile_rows_kernel(int rows, int cols, int tile, const float* __restrict__ tile_si,
                                        float* __restrict__ row_si) {
  const std::size_t tc = (std::size_t(cols) + std::size_t(tile) - 1) / std::size_t(tile);
  FP8EMU_FOR_EACH(e, std::size_t(rows) * tc) {
    const std::size_t r = e / tc, b = e % tc;
    row_si[e] = tile_si[(r / std::size_t(tile)) * tc + b];
  }
}
__global__ void spread_tile_cols_kernel(int rows, int cols, int tile, const float* __restrict__ tile_si,
                                        float* __restrict__ col_si) {
  const std::size_t tc = (std::size_t(cols) + std::size_t(tile) - 1) / std::size_t(tile),
                    tr = (std::size_t(rows) + std::size_t(tile) - 1) / std::size_t(tile);
  FP8EMU_FOR_EACH(e, std::size_t(cols) * tr) {
    const std::size_t c = e / tr, b = e % tr;
    col_si[e] = tile_si[b * tc + c / std::size_t(tile)];
  }
}

#undef FP8EMU_FOR_EACH
