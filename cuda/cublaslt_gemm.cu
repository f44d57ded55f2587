// cuBLASLt GEMMs (see include/fp8emu/cuda/cublaslt.hpp).
//
// cuBLASLt is column-major. A row-major [R, C] matrix is a column-major C x R matrix with leading
// dimension C, so D [M, N] = A [M, K] B [N, K]^T (row-major) is, column-major,
//   D^T (N x M, ld N) = op(B') op(A')   with B' = B as K x N (ld K) transposed (T) and
//                                            A' = A as K x M (ld K) not transposed (N):
// cuBLASLt's "A" is our B and its "B" is our A, in the TN form its FP8 kernels require; its m = N,
// n = M, k = K, and the scale pointers swap with the operands. The bias runs along cuBLASLt's rows,
// our columns j.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "device_buffer.hpp"
#include "fp8emu/cuda/format_types.hpp"
#include "fp8emu/emulation/quantize.hpp"
#include "fp8emu/core/half.hpp"
#include "fp8emu/core/convert.hpp"
#include "fp8emu/cuda/cublaslt.hpp"
#include "fp8emu/util/error.hpp"
#include "launch.hpp"

namespace fp8emu::cuda {
namespace {

void check_lt(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    FP8EMU_FAIL("cuBLASLt call ", what, " failed: ", cublasLtGetStatusName(s), ": ", cublasLtGetStatusString(s));
}
#define FP8EMU_LT_CHECK(call) check_lt((call), #call)

constexpr std::size_t kWorkspaceBytes = std::size_t(32) << 20;

cudaDataType_t fp8_type(Format f) {
  emu::require_ocp_fp8(f, "cuBLASLt FP8 GEMM");
  return cuda_format(f).data_type;
}

// RAII holders of cuBLASLt descriptors.
struct Desc {
  cublasLtMatmulDesc_t d = nullptr;
  Desc() = default;
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  ~Desc() {
    if (d) cublasLtMatmulDescDestroy(d);
  }
};
struct Layout {
  cublasLtMatrixLayout_t l = nullptr;
  Layout() = default;
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;
  ~Layout() {
    if (l) cublasLtMatrixLayoutDestroy(l);
  }
};
struct Pref {
  cublasLtMatmulPreference_t p = nullptr;
  ~Pref() {
    if (p) cublasLtMatmulPreferenceDestroy(p);
  }
};

template <class T>
void set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const T& v, const char* what) {
  check_lt(cublasLtMatmulDescSetAttribute(d, a, &v, sizeof v), what);
}

// What selects a plan: everything but the pointers (which are set on every call).
struct PlanKey {
  int kind;  // 0 FP8, 1 BF16, 2 FP32, 3 TF32, 5 NN fp32, 6 NN bf16 -> fp32
  int M, N, K;
  int fa, fb, output;
  bool fast, bias, amax;
  int split_k;  // 0: the heuristic's choice
  int align = 0;  // NN GEMMs: the pointers' common alignment in bytes (the heuristic's minimum)
  bool operator<(const PlanKey& o) const {
    return std::tie(kind, M, N, K, fa, fb, output, fast, bias, amax, split_k, align) <
           std::tie(o.kind, o.M, o.N, o.K, o.fa, o.fb, o.output, o.fast, o.bias, o.amax, o.split_k, o.align);
  }
};

// A descriptor, its layouts and the heuristic's first algorithm, reused by calls of the same key.
struct Plan {
  Desc desc;
  Layout la, lb, lc, ld;
  cublasLtMatmulAlgo_t algo{};
  LtAlgo config;              // the algorithm's split-K, reduction scheme, tile, stages
  bool c_null = false;        // pass C as null (beta = 0) instead of D in place
};

template <class T>
T algo_attr(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t a, const char* what) {
  T v{};
  std::size_t written = 0;
  check_lt(cublasLtMatmulAlgoConfigGetAttribute(&algo, a, &v, sizeof v, &written), what);
  return v;
}

}  // namespace

struct LtContext::Impl {
  cublasLtHandle_t handle = nullptr;
  detail::DeviceBuffer<unsigned char> workspace;
  std::map<PlanKey, std::unique_ptr<Plan>> plans;

  // Layouts for D^T = op(Alt) op(Blt) (see the file comment), then the heuristic's choice.
  void finish_plan(Plan& p, cudaDataType_t type_a, cudaDataType_t type_b, cudaDataType_t c_type,
                   cudaDataType_t d_type, int M, int N, int K, const char* what, int split_k = 0, bool nn = false,
                   int align = 0) {
    const cublasOperation_t transa = nn ? CUBLAS_OP_N : CUBLAS_OP_T, transb = CUBLAS_OP_N;
    set_attr(p.desc.d, CUBLASLT_MATMUL_DESC_TRANSA, transa, "TRANSA");
    set_attr(p.desc.d, CUBLASLT_MATMUL_DESC_TRANSB, transb, "TRANSB");
    if (nn)  // cuBLASLt's A = our B [K, N] row-major (N x K column-major, ld N); its B = our A (K x M, ld K).
      FP8EMU_LT_CHECK(cublasLtMatrixLayoutCreate(&p.la.l, type_b, std::uint64_t(N), std::uint64_t(K), N));
    else  // cuBLASLt's A = our B (stored K x N, ld K, transposed); its B = our A (K x M, ld K).
      FP8EMU_LT_CHECK(cublasLtMatrixLayoutCreate(&p.la.l, type_b, std::uint64_t(K), std::uint64_t(N), K));
    FP8EMU_LT_CHECK(cublasLtMatrixLayoutCreate(&p.lb.l, type_a, std::uint64_t(K), std::uint64_t(M), K));
    FP8EMU_LT_CHECK(cublasLtMatrixLayoutCreate(&p.lc.l, c_type, std::uint64_t(N), std::uint64_t(M), N));
    FP8EMU_LT_CHECK(cublasLtMatrixLayoutCreate(&p.ld.l, d_type, std::uint64_t(N), std::uint64_t(M), N));
    Pref pref;
    FP8EMU_LT_CHECK(cublasLtMatmulPreferenceCreate(&pref.p));
    const std::size_t ws = workspace.size();
    FP8EMU_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                         sizeof ws));
    if (align > 0) {  // the pointers this plan will see (the default assumes 256 bytes)
      const std::uint32_t a = std::uint32_t(align);
      for (const cublasLtMatmulPreferenceAttributes_t at :
           {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
        FP8EMU_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.p, at, &a, sizeof a));
    }
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    FP8EMU_LT_CHECK(
        cublasLtMatmulAlgoGetHeuristic(handle, p.desc.d, p.la.l, p.lb.l, p.lc.l, p.ld.l, pref.p, 1, &result, &found));
    FP8EMU_CHECK(found > 0 && result.state == CUBLAS_STATUS_SUCCESS, "cuBLASLt has no algorithm for the ", what,
                 " GEMM M=", M, " N=", N, " K=", K);
    p.algo = result.algo;
    if (split_k > 0) {  // the heuristic's algorithm with a forced split-K (and, split, a workspace reduction)
      const std::int32_t splits = split_k;
      const std::uint32_t scheme = split_k > 1 ? CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE : CUBLASLT_REDUCTION_SCHEME_NONE;
      FP8EMU_LT_CHECK(cublasLtMatmulAlgoConfigSetAttribute(&p.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits,
                                                           sizeof splits));
      FP8EMU_LT_CHECK(cublasLtMatmulAlgoConfigSetAttribute(&p.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme,
                                                           sizeof scheme));
      cublasLtMatmulHeuristicResult_t checked{};
      const cublasStatus_t st =
          cublasLtMatmulAlgoCheck(handle, p.desc.d, p.la.l, p.lb.l, p.lc.l, p.ld.l, &p.algo, &checked);
      FP8EMU_CHECK(st == CUBLAS_STATUS_SUCCESS && checked.workspaceSize <= workspace.size(), "cuBLASLt: the ", what,
                   " GEMM M=", M, " N=", N, " K=", K, " does not run with split-K ", split_k, ": ",
                   st == CUBLAS_STATUS_SUCCESS ? "it needs more than the workspace" : cublasLtGetStatusString(st));
    }
    p.config.split_k = algo_attr<std::int32_t>(p.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, "SPLITK_NUM");
    p.config.reduction = algo_attr<std::uint32_t>(p.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, "REDUCTION_SCHEME");
    p.config.tile = algo_attr<std::uint32_t>(p.algo, CUBLASLT_ALGO_CONFIG_TILE_ID, "TILE_ID");
    p.config.stages = algo_attr<std::uint32_t>(p.algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, "STAGES_ID");
  }

  // beta = 0: C is never read. cuBLASLt still wants its layout; D stands in for its pointer when C
  // and D have one type, and a null pointer when they differ (an FP8 D with a bf16 C: D in place of
  // C is CUBLAS_STATUS_INVALID_VALUE there, measured on an H200).
  void run(Plan& p, const void* A, const void* B, void* D) {
    const float alpha = 1.0f, beta = 0.0f;
    const void* C = p.c_null ? nullptr : D;
    FP8EMU_LT_CHECK(cublasLtMatmul(handle, p.desc.d, &alpha, B, p.la.l, A, p.lb.l, &beta, C, p.lc.l, D, p.ld.l,
                                   &p.algo, workspace.get(), workspace.size(), nullptr));
  }
};

LtContext::LtContext() : impl_(std::make_unique<Impl>()) {
  detail::use_fp8_device();
  FP8EMU_LT_CHECK(cublasLtCreate(&impl_->handle));
  impl_->workspace = detail::DeviceBuffer<unsigned char>(kWorkspaceBytes);
}

LtContext::~LtContext() {
  if (!impl_) return;
  impl_->plans.clear();
  if (impl_->handle) cublasLtDestroy(impl_->handle);
}

void LtContext::gemm_fp8_tn(const LtFp8Gemm& g) {
  FP8EMU_CHECK(g.M > 0 && g.N > 0 && g.K > 0, "cuBLASLt FP8 GEMM: M, N, K must be positive, got ", g.M, ", ", g.N,
               ", ", g.K);
  FP8EMU_CHECK(g.K % 16 == 0 && g.N % 16 == 0, "cuBLASLt FP8 GEMM: K and N must be multiples of 16, got K=", g.K,
               " N=", g.N);
  FP8EMU_CHECK(!(g.format_a == Format::kE5M2 && g.format_b == Format::kE5M2),
               "cuBLASLt FP8 GEMM: E5M2 x E5M2 is not supported; use E4M3 for one operand");
  FP8EMU_CHECK(g.A && g.B && g.D && g.scale_inv_a && g.scale_inv_b, "cuBLASLt FP8 GEMM: null operand pointer");
  FP8EMU_CHECK(g.output != LtOutput::kE4M3 || g.d_scale, "cuBLASLt FP8 GEMM: an E4M3 output needs a D scale");
  FP8EMU_CHECK(!g.amax_d || g.output == LtOutput::kE4M3,
               "cuBLASLt FP8 GEMM: AMAX_D is computed only for an FP8 output (use LtOutput::kE4M3)");
  FP8EMU_CHECK(g.split_k >= 0, "cuBLASLt FP8 GEMM: split_k must be >= 0 (0: the heuristic's choice), got ",
               g.split_k);
  detail::use_fp8_device();
  const PlanKey key{0, g.M, g.N, g.K, int(g.format_a), int(g.format_b), int(g.output), g.fast_accum,
                    g.bias != nullptr, g.amax_d != nullptr, g.split_k};
  std::unique_ptr<Plan>& slot = impl_->plans[key];
  if (!slot) {
    auto p = std::make_unique<Plan>();
    FP8EMU_LT_CHECK(cublasLtMatmulDescCreate(&p->desc.d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const std::int8_t fast = g.fast_accum ? 1 : 0;
    set_attr(p->desc.d, CUBLASLT_MATMUL_DESC_FAST_ACCUM, fast, "FAST_ACCUM");
    if (g.bias) {
      const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
      set_attr(p->desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE, epi, "EPILOGUE");
      const std::int32_t bias_type = CUDA_R_16BF;
      set_attr(p->desc.d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type, "BIAS_DATA_TYPE");
    }
    set_pointers(p->desc.d, g);  // the heuristic reads them for alignment
    const cudaDataType_t c_type = g.output == LtOutput::kFp32 ? CUDA_R_32F : CUDA_R_16BF;
    const cudaDataType_t d_type = g.output == LtOutput::kE4M3 ? CUDA_R_8F_E4M3 : c_type;
    p->c_null = d_type != c_type;
    impl_->finish_plan(*p, fp8_type(g.format_a), fp8_type(g.format_b), c_type, d_type, g.M, g.N, g.K, "FP8",
                       g.split_k);
    slot = std::move(p);
  }
  set_pointers(slot->desc.d, g);
  impl_->run(*slot, g.A, g.B, g.D);
  if (g.algo) *g.algo = slot->config;
}

void LtContext::set_pointers(void* desc_handle, const LtFp8Gemm& g) {
  cublasLtMatmulDesc_t d = static_cast<cublasLtMatmulDesc_t>(desc_handle);
  // Scales follow the swapped operands: cuBLASLt's A is our B.
  const void* a_scale = g.scale_inv_b;
  const void* b_scale = g.scale_inv_a;
  set_attr(d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, a_scale, "A_SCALE_POINTER");
  set_attr(d, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, b_scale, "B_SCALE_POINTER");
  if (g.d_scale) {
    const void* d_scale = g.d_scale;
    set_attr(d, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, d_scale, "D_SCALE_POINTER");
  }
  if (g.amax_d) {
    void* amax = g.amax_d;
    set_attr(d, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, amax, "AMAX_D_POINTER");
  }
  if (g.bias) {
    const void* bias = g.bias;
    set_attr(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias, "BIAS_POINTER");
  }
}

void LtContext::gemm_bf16_tn(int M, int N, int K, const std::uint16_t* A, const std::uint16_t* B, std::uint16_t* D) {
  FP8EMU_CHECK(M > 0 && N > 0 && K > 0, "cuBLASLt BF16 GEMM: M, N, K must be positive");
  detail::use_fp8_device();
  const PlanKey key{1, M, N, K, 0, 0, 0, false, false, false, 0};
  std::unique_ptr<Plan>& slot = impl_->plans[key];
  if (!slot) {
    auto p = std::make_unique<Plan>();
    FP8EMU_LT_CHECK(cublasLtMatmulDescCreate(&p->desc.d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    impl_->finish_plan(*p, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, M, N, K, "BF16");
    slot = std::move(p);
  }
  impl_->run(*slot, A, B, D);
}

bool LtContext::gemm_nn(int M, int N, int K, const void* A, const void* B, float* D, bool bf16_inputs) {
  FP8EMU_CHECK(M > 0 && N > 0 && K > 0, "cuBLASLt NN GEMM: M, N, K must be positive");
  detail::use_fp8_device();
  // The largest power of two (at most 256) dividing every address.
  const std::uintptr_t any = reinterpret_cast<std::uintptr_t>(A) | reinterpret_cast<std::uintptr_t>(B) |
                             reinterpret_cast<std::uintptr_t>(D) | std::uintptr_t(256);
  const int align = int(any & (~any + 1));
  PlanKey key{bf16_inputs ? 6 : 5, M, N, K, 0, 0, 0, false, false, false, 0};
  key.align = align;
  std::unique_ptr<Plan>& slot = impl_->plans[key];
  if (!slot) {
    auto p = std::make_unique<Plan>();
    try {  // no descriptor, layout or algorithm for this shape and alignment: the caller computes D
      FP8EMU_LT_CHECK(cublasLtMatmulDescCreate(&p->desc.d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      const cudaDataType_t in = bf16_inputs ? CUDA_R_16BF : CUDA_R_32F;
      impl_->finish_plan(*p, in, in, CUDA_R_32F, CUDA_R_32F, M, N, K, bf16_inputs ? "BF16 NN" : "FP32 NN", 0, true,
                         align);
    } catch (const Error&) {
      impl_->plans.erase(key);
      return false;
    }
    slot = std::move(p);
  }
  impl_->run(*slot, A, B, D);  // a failure here is an error, not a refusal
  return true;
}

void LtContext::gemm_f32_tn(int M, int N, int K, const float* A, const float* B, float* D, bool tf32) {
  FP8EMU_CHECK(M > 0 && N > 0 && K > 0, "cuBLASLt FP32 GEMM: M, N, K must be positive");
  detail::use_fp8_device();
  const PlanKey key{tf32 ? 3 : 2, M, N, K, 0, 0, 0, false, false, false, 0};
  std::unique_ptr<Plan>& slot = impl_->plans[key];
  if (!slot) {
    auto p = std::make_unique<Plan>();
    FP8EMU_LT_CHECK(cublasLtMatmulDescCreate(&p->desc.d, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                                             CUDA_R_32F));
    impl_->finish_plan(*p, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, M, N, K, tf32 ? "TF32" : "FP32");
    slot = std::move(p);
  }
  impl_->run(*slot, A, B, D);
}

void LtContext::synchronize() { FP8EMU_CUDA_CHECK(cudaDeviceSynchronize()); }

void lt_gemm_fp8_tn_host(int M, int N, int K, const std::uint8_t* A, Format fa, float scale_inv_a,
                         const std::uint8_t* B, Format fb, float scale_inv_b, bool fast_accum, const float* bias,
                         LtOutput output, void* D, float d_scale, float* amax_d, int split_k, LtAlgo* algo) {
  LtContext ctx;
  using detail::DeviceBuffer;
  DeviceBuffer<std::uint8_t> da(A, std::size_t(M) * std::size_t(K)), db(B, std::size_t(N) * std::size_t(K));
  DeviceBuffer<float> dsa(&scale_inv_a, 1), dsb(&scale_inv_b, 1), dds(&d_scale, 1), damax(1);
  damax.zero();
  DeviceBuffer<std::uint16_t> dbias;
  if (bias) {
    std::vector<std::uint16_t> b16(static_cast<std::size_t>(N));
    for (int j = 0; j < N; ++j) b16[std::size_t(j)] = core::f32_bits_to_bf16_rne(core::f32_to_bits(bias[j]));
    dbias = DeviceBuffer<std::uint16_t>(b16.data(), b16.size());
  }
  const std::size_t elem = output == LtOutput::kFp32 ? 4 : output == LtOutput::kBf16 ? 2 : 1;
  DeviceBuffer<unsigned char> dd(std::size_t(M) * std::size_t(N) * elem);
  LtFp8Gemm g =
      lt_fp8_gemm(M, N, K, da.get(), fa, dsa.get(), db.get(), fb, dsb.get(), fast_accum, output, dd.get());
  g.bias = bias ? dbias.get() : nullptr;
  g.d_scale = output == LtOutput::kE4M3 ? dds.get() : nullptr;
  g.amax_d = amax_d ? damax.get() : nullptr;
  g.split_k = split_k;
  g.algo = algo;
  ctx.gemm_fp8_tn(g);
  dd.download(static_cast<unsigned char*>(D), dd.size());  // synchronizes
  if (amax_d) damax.download(amax_d, 1);
}

}  // namespace fp8emu::cuda
