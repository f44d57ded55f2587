// NVFP4 block casts, dequantization and GEMM against a reference written here from Transformer
// Engine's published arithmetic (common/cast/nvfp4/core_nvfp4.cuh, dequantize_nvfp4.cuh,
// recipe/nvfp4.cu; restated in docs/nvfp4.md), with its own E4M3 and E2M1 conversions taken from
// the OCP formats' value tables (OCP MX v1.0 §5.3, OCP FP8 v1.0), not from fp8emu's encoder.
// The reference uses plain IEEE fp32 operations, one per line, in TE's order.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "fp8emu/backend/device.hpp"
#include "fp8emu/core/cast.hpp"
#include "fp8emu/emulation/block_quantize.hpp"

using namespace fp8emu;

namespace {

// ---- the reference conversions, from the formats' value tables ------------------------------

// Positive E4M3 (e4m3fn) values by code 0..126: subnormals m/8 * 2^-6, normals (1 + m/8) 2^(e-7).
std::vector<double> e4m3_values() {
  std::vector<double> v;
  for (int c = 0; c < 127; ++c) {
    const int e = c >> 3, m = c & 7;
    v.push_back(e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7));
  }
  return v;
}
// The 8 E2M1 magnitudes by code.
const double kE2M1[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};

// Round-to-nearest-even onto a sorted table of magnitudes (ties to the even code), saturating at the
// last entry: the code of |x|.
int rne_code(double a, const double* table, int n) {
  if (a >= table[n - 1]) return n - 1;
  int lo = 0;
  while (table[lo + 1] <= a) ++lo;
  if (table[lo] == a) return lo;
  const double dl = a - table[lo], dh = table[lo + 1] - a;
  if (dl < dh) return lo;
  if (dh < dl) return lo + 1;
  return lo % 2 == 0 ? lo : lo + 1;
}

// E4M3 satfinite RN of a non-negative finite value, decoded.
float ref_e4m3(float x) {
  static const std::vector<double> t = e4m3_values();
  return float(t[std::size_t(rne_code(double(x), t.data(), int(t.size())))]);
}

// cvt.rn.satfinite.e2m1: NaN -> +6 (code 7); sign kept (zero too, as CUDA's host conversion).
std::uint8_t ref_e2m1(float x) {
  if (std::isnan(x)) return 7;
  const std::uint8_t s = std::signbit(x) ? 8 : 0;
  return std::uint8_t(s | rne_code(std::fabs(double(x)), kE2M1, 8));
}
float decode_e2m1(std::uint8_t q) { return float((q & 8) ? -kE2M1[q & 7] : kE2M1[q & 7]); }

// ---- TE's scale arithmetic -----------------------------------------------------------------

float ref_amax(const float* x, std::size_t n) {  // fmaxf over |x|, NaN ignored
  float m = 0.0f;
  for (std::size_t i = 0; i < n; ++i) m = std::fmax(m, std::fabs(x[i]));
  return m;
}
float ref_s_enc(float amax) {  // compute_global_encode_scaling_factor_FP4
  volatile float s = 2688.0f / amax;
  float r = std::fmin(s, FLT_MAX);
  if (amax == 0.0f || r == 0.0f) r = 1.0f;
  return r;
}
struct RefBlock {
  float s_dec_b, mult;
};
RefBlock ref_block(float block_amax, float s_enc) {
  volatile float s_dec = 1.0f / s_enc;
  volatile float k = s_enc * (1.0f / 6.0f);
  volatile float sb = block_amax * k;
  const float s_dec_b = ref_e4m3(std::fmin(sb, FLT_MAX));
  volatile float p = s_dec_b * s_dec;
  volatile float inv = 1.0f / p;
  return {s_dec_b, std::fmin(inv, FLT_MAX)};
}

// One view (rows of K along `rowwise`) as the reference casts it: 1 x 16 blocks.
struct RefView {
  std::vector<std::uint8_t> codes;
  std::vector<float> scale;
  float amax = 0.0f;
};
RefView ref_cast_1x16(const std::vector<float>& x, int rows, int cols, bool rowwise) {
  const int n = rowwise ? rows : cols, K = rowwise ? cols : rows, nb = (K + 15) / 16;
  RefView v;
  v.amax = ref_amax(x.data(), x.size());
  const float s_enc = ref_s_enc(v.amax);
  auto at = [&](int r, int k) { return rowwise ? x[std::size_t(r) * cols + k] : x[std::size_t(k) * cols + r]; };
  v.codes.resize(std::size_t(n) * K);
  v.scale.resize(std::size_t(n) * nb);
  for (int r = 0; r < n; ++r)
    for (int b = 0; b < nb; ++b) {
      float m = 0.0f;
      for (int k = b * 16; k < std::min(K, b * 16 + 16); ++k) m = std::fmax(m, std::fabs(at(r, k)));
      const RefBlock s = ref_block(m, s_enc);
      v.scale[std::size_t(r) * nb + b] = s.s_dec_b;
      for (int k = b * 16; k < std::min(K, b * 16 + 16); ++k) {
        volatile float y = at(r, k) * s.mult;
        v.codes[std::size_t(r) * K + k] = ref_e2m1(y);
      }
    }
  return v;
}

// Inputs whose blocks span many binades: some all-zero blocks, some tiny blocks (their E4M3 scale
// underflows to 0), one huge block, and optional NaN and Inf elements.
std::vector<float> make_input(int rows, int cols, std::uint32_t seed, bool specials) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_int_distribution<int> e(-30, 12);
  std::vector<float> x(std::size_t(rows) * cols);
  for (int r = 0; r < rows; ++r)
    for (int b = 0; b * 16 < cols; ++b) {
      const int kind = int(rng() % 8);
      const float mag = kind == 0 ? 0.0f : kind == 1 ? 1e-9f : kind == 2 ? 3e4f : std::ldexp(1.0f, e(rng));
      for (int c = b * 16; c < std::min(cols, b * 16 + 16); ++c) x[std::size_t(r) * cols + c] = g(rng) * mag;
    }
  if (specials && x.size() > 40) {
    x[3] = std::numeric_limits<float>::quiet_NaN();
    x[37] = -std::numeric_limits<float>::quiet_NaN();
    x[x.size() / 2] = -0.0f;
  }
  return x;
}

core::BlockRule nvfp4_rule() { return core::BlockRule::nvfp4(kSpecE2M1, nullptr); }

}  // namespace

TEST_CASE("NVFP4: the reference's tables are the OCP formats'", "[nvfp4]") {
  // Spot values of the tables the reference rounds onto (OCP FP8 v1.0 Table 1, OCP MX v1.0 §5.3).
  const std::vector<double> t = e4m3_values();
  CHECK(t.size() == 127);
  CHECK(t[1] == std::ldexp(1.0, -9));  // smallest subnormal
  CHECK(t[8] == std::ldexp(1.0, -6));  // smallest normal
  CHECK(t[126] == 448.0);
  CHECK(ref_e4m3(0.5f * float(std::ldexp(1.0, -9))) == 0.0f);  // tie to the even code 0
  CHECK(ref_e4m3(1e30f) == 448.0f);
  CHECK(ref_e2m1(0.25f) == 0);
  CHECK(ref_e2m1(0.75f) == 2);  // tie 0.5 | 1.0 goes to the even code (1.0)
  CHECK(ref_e2m1(2.5f) == 4);   // 2.0
  CHECK(ref_e2m1(3.5f) == 6);   // 4.0
  CHECK(ref_e2m1(5.0f) == 6);   // 4.0
  CHECK(ref_e2m1(-7.0f) == 15);
}

TEST_CASE("NVFP4: a worked block: amax 6 in a tensor of amax 6", "[nvfp4]") {
  // S_enc = 2688 / 6 = 448; S_dec_b = E4M3(RN(6 * RN(448 * fl32(1/6)))) = 448 (RN(448 * fl32(1/6))
  // = 74.66667f, times 6 is 448.00003f, which E4M3 rounds to 448); the multiplier RN(1 / RN(448 *
  // RN(1/448))) is within an ulp of 1, so the block's values land on their own E2M1 codes.
  std::vector<float> x = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f, 0.25f};
  const emu::BlockQuantized q =
      emu::quantize_blocks(x.data(), 1, 16, emu::BlockAxis::kRowwise, Format::kE2M1, 16, nvfp4_rule(), nullptr);
  REQUIRE(q.amax.has_value());
  CHECK(*q.amax == 6.0f);
  CHECK(q.scale_inv[0] == 448.0f);
  const std::vector<std::uint8_t> want = {0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15, 0};
  CHECK(q.codes == want);
}

TEST_CASE("NVFP4: 1 x 16 casts equal TE's arithmetic, both axes, ragged blocks, specials", "[nvfp4]") {
  for (const auto& [rows, cols] : {std::pair<int, int>{7, 50}, {33, 64}, {16, 17}, {1, 5}})
    for (const bool specials : {false, true})
      for (const bool rowwise : {true, false}) {
        const std::vector<float> x = make_input(rows, cols, std::uint32_t(rows * 131 + cols), specials);
        const RefView want = ref_cast_1x16(x, rows, cols, rowwise);
        emu::QuantizeStats st;
        const emu::BlockQuantized q =
            emu::quantize_blocks(x.data(), rows, cols, rowwise ? emu::BlockAxis::kRowwise : emu::BlockAxis::kColumnwise,
                                 Format::kE2M1, 16, nvfp4_rule(), &st);
        INFO(rows << "x" << cols << (specials ? " specials" : "") << (rowwise ? " rowwise" : " columnwise"));
        REQUIRE(q.amax.has_value());
        CHECK(*q.amax == want.amax);
        CHECK(q.codes == want.codes);
        CHECK(q.scale_inv == want.scale);
        CHECK(st.count == x.size());
        CHECK(st.nan == (specials && x.size() > 40 ? 2u : 0u));
        // Dequantization: RN(decode(q) * RN(RN(S_dec_b * amax) * fl32(1/2688))) (dequantize_nvfp4.cuh).
        std::vector<float> y(q.codes.size());
        emu::dequantize_blocks(q, y.data());
        const int nb = q.blocks();
        for (int r = 0; r < q.n; ++r)
          for (int k = 0; k < q.k; ++k) {
            volatile float s1 = want.scale[std::size_t(r) * nb + k / 16] * want.amax;
            volatile float s2 = s1 * (1.0f / 2688.0f);
            volatile float v = decode_e2m1(want.codes[std::size_t(r) * q.k + k]) * s2;
            const float got = y[std::size_t(r) * q.k + k];
            if (got != v) FAIL("dequantize [" << r << ", " << k << "]: " << got << " vs " << float(v));
          }
      }
}

TEST_CASE("NVFP4: edge tensors: all zero, an infinite element", "[nvfp4]") {
  // All zero: amax 0 -> S_enc = 1; every block scale 0, multiplier FLT_MAX; codes +0.
  std::vector<float> z(32, 0.0f);
  const emu::BlockQuantized q0 =
      emu::quantize_blocks(z.data(), 2, 16, emu::BlockAxis::kRowwise, Format::kE2M1, 16, nvfp4_rule(), nullptr);
  CHECK(*q0.amax == 0.0f);
  CHECK(q0.scale_inv == std::vector<float>{0.0f, 0.0f});
  CHECK(std::all_of(q0.codes.begin(), q0.codes.end(), [](std::uint8_t c) { return c == 0; }));
  // +Inf: tensor amax +Inf -> 2688 / Inf = 0 -> S_enc = 1; its block's scale saturates to 448; the
  // element saturates to +6; the other block is scaled under S_enc = 1.
  std::vector<float> x(32, 1.0f);
  x[5] = std::numeric_limits<float>::infinity();
  const RefView want = ref_cast_1x16(x, 1, 32, true);
  const emu::BlockQuantized q =
      emu::quantize_blocks(x.data(), 1, 32, emu::BlockAxis::kRowwise, Format::kE2M1, 16, nvfp4_rule(), nullptr);
  CHECK(std::isinf(*q.amax));
  CHECK(q.scale_inv == want.scale);
  CHECK(q.scale_inv[0] == 448.0f);
  CHECK(q.codes == want.codes);
  CHECK(q.codes[5] == 7);
}

TEST_CASE("NVFP4: 16 x 16 tiles take each tile's amax, both views the same codes", "[nvfp4]") {
  const int rows = 40, cols = 35;
  const std::vector<float> x = make_input(rows, cols, 5, true);
  const emu::BlockQuantized2D q = emu::quantize_tiles(x.data(), rows, cols, Format::kE2M1, 16, nvfp4_rule(), nullptr);
  const float amax = ref_amax(x.data(), x.size());
  const float s_enc = ref_s_enc(amax);
  REQUIRE(q.rowwise.amax.has_value());
  CHECK(*q.rowwise.amax == amax);
  CHECK(*q.columnwise.amax == amax);
  const int tc = (cols + 15) / 16;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      float m = 0.0f;
      for (int i = r / 16 * 16; i < std::min(rows, r / 16 * 16 + 16); ++i)
        for (int j = c / 16 * 16; j < std::min(cols, c / 16 * 16 + 16); ++j)
          m = std::fmax(m, std::fabs(x[std::size_t(i) * cols + j]));
      const RefBlock s = ref_block(m, s_enc);
      volatile float y = x[std::size_t(r) * cols + c] * s.mult;
      const std::uint8_t code = ref_e2m1(y);
      if (q.rowwise.codes[std::size_t(r) * cols + c] != code || q.columnwise.codes[std::size_t(c) * rows + r] != code)
        FAIL("tile code [" << r << ", " << c << "]");
      if (q.rowwise.scale_inv[std::size_t(r) * tc + c / 16] != s.s_dec_b ||
          q.columnwise.scale_inv[std::size_t(c) * ((rows + 15) / 16) + r / 16] != s.s_dec_b)
        FAIL("tile scale [" << r << ", " << c << "]");
    }
}

TEST_CASE("NVFP4 GEMM: per-block fp32 sums times the E4M3 scales, then TE's alpha", "[nvfp4][gemm]") {
  // The model (a documented choice, docs/nvfp4.md): each 16-block's products summed in fp32 in k
  // order from zero, times RN(sa * sb), added to the fp32 total in block order; then
  // RN(alpha * total), alpha = RN(RN(amax_a * amax_b) * fl32(1 / (6*6*448*448))) (recipe/nvfp4.cu).
  const int M = 9, N = 11, K = 70;
  const std::vector<float> xa = make_input(M, K, 21, false), xb = make_input(N, K, 22, false);
  const emu::BlockQuantized a =
      emu::quantize_blocks(xa.data(), M, K, emu::BlockAxis::kRowwise, Format::kE2M1, 16, nvfp4_rule(), nullptr);
  const emu::BlockQuantized b =
      emu::quantize_blocks(xb.data(), N, K, emu::BlockAxis::kRowwise, Format::kE2M1, 16, nvfp4_rule(), nullptr);
  volatile float a1 = *a.amax * *b.amax;
  volatile float alpha = a1 * (1.0f / (6.0f * 6.0f * 448.0f * 448.0f));
  std::vector<float> want(std::size_t(M) * N);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      float d = 0.0f;
      for (int blk = 0; blk * 16 < K; ++blk) {
        float p = 0.0f;
        for (int k = blk * 16; k < std::min(K, blk * 16 + 16); ++k) {
          volatile float prod = decode_e2m1(a.codes[std::size_t(i) * K + k]) * decode_e2m1(b.codes[std::size_t(j) * K + k]);
          volatile float s = p + prod;
          p = s;
        }
        volatile float s = a.scale_inv[std::size_t(i) * a.blocks() + blk] * b.scale_inv[std::size_t(j) * b.blocks() + blk];
        volatile float t = p * s;
        volatile float u = d + t;
        d = u;
      }
      volatile float out = alpha * d;
      want[std::size_t(i) * N + j] = out;
    }
  std::vector<float> got(want.size(), -1.0f);
  emu::gemm_fp8_block_tn(a, b, got.data());
  CHECK(got == want);
  // The element layer's device, through the Device interface (amax in its memory).
  std::vector<float> dev(want.size(), -1.0f);
  const float amax[2] = {*a.amax, *b.amax};
  backend::element_device().gemm_fp8_block_tn(M, N, K, 16, a.codes.data(), Format::kE2M1, a.scale_inv.data(),
                                              b.codes.data(), Format::kE2M1, b.scale_inv.data(), amax, amax + 1, {},
                                              dev.data());
  CHECK(dev == want);
  // One operand with a tensor scale and one without: refused.
  emu::BlockQuantized plain = b;
  plain.amax.reset();
  CHECK_THROWS_AS(emu::gemm_fp8_block_tn(a, plain, got.data()), Error);
}

TEST_CASE("NVFP4 through the Device interface: both views, the amax slots, the checks", "[nvfp4]") {
  const int rows = 20, cols = 48;
  const std::vector<float> x = make_input(rows, cols, 9, true);
  const RefView rw = ref_cast_1x16(x, rows, cols, true), cw = ref_cast_1x16(x, rows, cols, false);
  for (const backend::Device* d : {&backend::cpu_device(), &backend::element_device()}) {
    std::vector<std::uint8_t> qr(x.size()), qc(x.size());
    std::vector<float> sr(std::size_t(rows) * 3), sc(std::size_t(cols) * 2);
    float amax[2] = {-1.0f, -1.0f};
    backend::CastCounters counters;
    const backend::BlockCast c = backend::BlockCast::nvfp4(Format::kE2M1, 16, false);
    d->block_cast(c, x.data(), rows, cols, {qr.data(), sr.data(), amax}, {qc.data(), sc.data(), amax + 1}, &counters);
    INFO(d->name());
    CHECK(qr == rw.codes);
    CHECK(qc == cw.codes);
    CHECK(sr == rw.scale);
    CHECK(sc == cw.scale);
    CHECK(amax[0] == rw.amax);
    CHECK(amax[1] == rw.amax);
    CHECK(counters.count == x.size());
    // A view without its amax slot is refused before any work.
    CHECK_THROWS_WITH(d->block_cast(c, x.data(), rows, cols, {qr.data(), sr.data()}, {}, nullptr),
                      "NVFP4 quantize: a view of E4M3 block scales needs its amax slot (the tensor scale's amax)");
  }
}
