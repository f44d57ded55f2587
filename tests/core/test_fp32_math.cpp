// core::exp_rn, log_rn and tanh_rn (include/fp8emu/core/fp32_math.hpp) against an independent
// oracle of the correctly rounded fp32 result: glibc's binary64 exp/log/tanh of the widened input,
// rounded to fp32, which is the correct rounding unless that binary64 value lies within a few
// binary64 ulps of an fp32 rounding midpoint (glibc's binary64 functions are within 1-2 ulps); there
// Boost.Multiprecision's 50-digit exp/log/tanh decides on which side of the midpoint the value is.
//
// The exhaustive test cases ([exhaustive], CTest label `exhaustive`) run every fp32 input of each
// function: the oracle on the non-trivial range, and on the trivial ranges (constant results, NaN,
// tanh's |x| < 2^-12) the range's value, which the fast test cases prove from the oracle at the
// range's ends and the function's monotonicity (or tanh's enclosure x - x^3/3 < tanh x < x).
#include <omp.h>

#include <boost/multiprecision/cpp_bin_float.hpp>
#include <catch2/catch.hpp>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "support/bits.hpp"
#include "fp8emu/core/fp32_math.hpp"

using namespace fp8emu;

namespace {

using Big = boost::multiprecision::cpp_bin_float_50;

enum class Fn { kExp, kLog, kTanh };

const char* name_of(Fn f) { return f == Fn::kExp ? "exp" : f == Fn::kLog ? "log" : "tanh"; }

using testing::bits;
using testing::from_bits;

float ours(Fn f, float x) {
  switch (f) {
    case Fn::kExp: return core::exp_rn(x);
    case Fn::kLog: return core::log_rn(x);
    case Fn::kTanh: return core::tanh_rn(x);
  }
  return 0.0f;
}

Big big_eval(Fn f, float x) {
  const Big b(x);
  switch (f) {
    case Fn::kExp: return boost::multiprecision::exp(b);
    case Fn::kLog: return boost::multiprecision::log(b);
    case Fn::kTanh: return boost::multiprecision::tanh(b);
  }
  return Big(0);
}

double glibc_eval(Fn f, float x) {
  switch (f) {
    case Fn::kExp: return ::exp(double(x));
    case Fn::kLog: return ::log(double(x));
    case Fn::kTanh: return ::tanh(double(x));
  }
  return 0.0;
}

// The fp32 values lo <= |y| < hi around the non-negative binary64 y, and their midpoint (for
// hi = +Inf: the overflow threshold FLT_MAX + 2^103).
struct Bracket {
  float lo, hi;
  double mid;
};
Bracket bracket(double y) {
  float lo = float(y);
  if (double(lo) > y) lo = std::nextafter(lo, 0.0f);
  const float hi = std::nextafter(lo, INFINITY);
  const double mid = std::isinf(hi) ? double(FLT_MAX) + 0x1p103 : (double(lo) + double(hi)) / 2;
  return {lo, hi, mid};
}

// The fp32 value nearest to the exact v (Boost value), ties impossible for these functions.
float round_big(const Big& v) {
  const Big av = abs(v);
  const Bracket b = bracket(double(av));  // double(av) within one binary64 ulp of av
  const Big mid(b.mid);
  if (av == mid) return NAN;  // a tie: impossible for exp, log, tanh of fp32 inputs; reported as a mismatch
  // double(av) may sit on either side of lo or of the midpoint; compare exactly.
  float r;
  if (av < Big(double(b.lo))) {
    const Bracket below = bracket(double(std::nextafter(b.lo, 0.0f)));
    r = av > Big(below.mid) ? b.lo : below.lo;
  } else {
    r = av > mid ? b.hi : b.lo;
  }
  return v < 0 ? -r : r;
}

// The oracle: RN32 of the exact result for a finite input of the non-trivial range.
float oracle(Fn f, float x, bool* used_boost = nullptr) {
  const double y = glibc_eval(f, x);
  const double ay = std::fabs(y);
  const float r = float(ay);  // RN32 of glibc's value
  // Is ay within 16 binary64 ulps of an fp32 midpoint? The midpoint nearest ay is the one between r
  // and its neighbour on ay's side (or FLT_MAX + 2^103 when r overflowed).
  double mid_dist;
  if (std::isinf(r)) {
    mid_dist = ay - (double(FLT_MAX) + 0x1p103);
  } else {
    const double d = ay - double(r);  // exact
    std::uint32_t nb = bits(r);
    nb = d >= 0 ? nb + 1 : (nb == 0 ? 1 : nb - 1);
    const double half = nb == 0x7F800000u ? 0x1p103  // above FLT_MAX: the overflow threshold
                                          : std::fabs(double(from_bits(nb)) - double(r)) / 2;
    mid_dist = std::fabs(d) - half;
  }
  std::uint64_t yb;
  std::memcpy(&yb, &ay, 8);
  std::uint64_t ub = ((yb >> 52) - 52) << 52;  // ulp(ay) = 2^(exponent - 52): ay is normal, >= 2^-151
  double ulp;
  std::memcpy(&ulp, &ub, 8);
  if (std::fabs(mid_dist) <= 16 * ulp) {
    if (used_boost) *used_boost = true;
    return round_big(big_eval(f, x));
  }
  return std::signbit(y) ? -r : r;
}

// The non-trivial ranges, where the sweeps ask the oracle.
bool nontrivial(Fn f, float x) {
  const float ax = std::fabs(x);
  switch (f) {
    case Fn::kExp: return ax >= 0x1p-25f && x <= 89.0f && x >= -104.0f;
    case Fn::kLog: return x > 0.0f && x < INFINITY;
    case Fn::kTanh: return ax >= 0x1p-12f && ax <= 9.1f;
  }
  return false;
}

// The value on the trivial ranges (NaN included), from the range arguments of the fast tests.
std::uint32_t trivial_bits(Fn f, float x) {
  const std::uint32_t u = bits(x);
  if (std::isnan(x)) return u | 0x00400000u;  // the NaN made quiet
  switch (f) {
    case Fn::kExp:
      if (std::fabs(x) < 0x1p-25f) return bits(1.0f);
      return x > 0 ? bits(INFINITY) : bits(0.0f);
    case Fn::kLog:
      if (x == 0.0f) return bits(-INFINITY);
      if (x == INFINITY) return bits(INFINITY);
      return 0x7FC00000u;  // x < 0, -Inf
    case Fn::kTanh:
      if (std::fabs(x) < 0x1p-12f) return u;  // x itself (enclosure, see the fast test)
      return bits(std::copysign(1.0f, x));    // |x| > 9.1, Inf
  }
  return 0;
}

// The exhaustive sweeps cut the 2^32 bit patterns into ranges of one kind each (the same ranges
// as nontrivial and trivial_bits), so that the trivial ones run as tight loops.
enum class Kind { kOracle, kConstant, kIdentity, kQuietNaN };
struct Range {
  std::uint64_t begin, end;  // bit patterns [begin, end)
  Kind kind;
  std::uint32_t value;  // kConstant
};
std::vector<Range> ranges_of(Fn f) {
  const std::uint64_t kPosInf = 0x7F800000u, kNegZero = 0x80000000u, kNegInf = 0xFF800000u;
  const std::uint64_t kEnd = std::uint64_t(1) << 32;
  std::vector<Range> r;
  const auto add = [&r](std::uint64_t b, std::uint64_t e, Kind k, std::uint32_t v) { r.push_back({b, e, k, v}); };
  switch (f) {
    case Fn::kExp: {
      const std::uint64_t tiny = bits(0x1p-25f), hi = bits(89.0f), lo = bits(-104.0f);
      add(0, tiny, Kind::kConstant, bits(1.0f));
      add(tiny, hi + 1, Kind::kOracle, 0);
      add(hi + 1, kPosInf + 1, Kind::kConstant, bits(INFINITY));
      add(kNegZero, kNegZero + tiny, Kind::kConstant, bits(1.0f));
      add(kNegZero + tiny, lo + 1, Kind::kOracle, 0);
      add(lo + 1, kNegInf + 1, Kind::kConstant, bits(0.0f));
      break;
    }
    case Fn::kLog:
      add(0, 1, Kind::kConstant, bits(-INFINITY));
      add(1, kPosInf, Kind::kOracle, 0);
      add(kPosInf, kPosInf + 1, Kind::kConstant, bits(INFINITY));
      add(kNegZero, kNegZero + 1, Kind::kConstant, bits(-INFINITY));
      add(kNegZero + 1, kNegInf + 1, Kind::kConstant, 0x7FC00000u);
      break;
    case Fn::kTanh: {
      const std::uint64_t tiny = bits(0x1p-12f), hi = bits(9.1f);
      add(0, tiny, Kind::kIdentity, 0);
      add(tiny, hi + 1, Kind::kOracle, 0);
      add(hi + 1, kPosInf + 1, Kind::kConstant, bits(1.0f));
      add(kNegZero, kNegZero + tiny, Kind::kIdentity, 0);
      add(kNegZero + tiny, kNegZero + hi + 1, Kind::kOracle, 0);
      add(kNegZero + hi + 1, kNegInf + 1, Kind::kConstant, bits(-1.0f));
      break;
    }
  }
  r.push_back({kPosInf + 1, kNegZero, Kind::kQuietNaN, 0});
  r.push_back({kNegInf + 1, kEnd, Kind::kQuietNaN, 0});
  return r;
}

struct Sweep {
  std::uint64_t checked = 0, oracle_calls = 0, boost_calls = 0, mismatches = 0;
  std::vector<std::string> first;
};

// Every fp32 input: the ranges of ranges_of, which must cover the 2^32 patterns once.
Sweep sweep(Fn f) {
  Sweep s;
  constexpr std::uint64_t kChunk = std::uint64_t(1) << 16;
  struct Work {
    std::uint64_t begin, end;
    Range range;
  };
  std::vector<Work> work;
  std::uint64_t covered = 0;
  for (const Range& r : ranges_of(f)) {
    covered += r.end - r.begin;
    for (std::uint64_t b = r.begin; b < r.end; b += kChunk) work.push_back({b, std::min(r.end, b + kChunk), r});
  }
  if (covered != (std::uint64_t(1) << 32)) {
    s.mismatches = 1;
    s.first.push_back("the ranges do not cover the 2^32 inputs");
    return s;
  }
  std::uint64_t checked = 0, oracle_calls = 0, boost_calls = 0, mismatches = 0;
#pragma omp parallel for schedule(dynamic, 16) reduction(+ : checked, oracle_calls, boost_calls, mismatches)
  for (std::int64_t w = 0; w < std::int64_t(work.size()); ++w) {
    const Work& wk = work[std::size_t(w)];
    for (std::uint64_t i = wk.begin; i < wk.end; ++i) {
      const std::uint32_t u = std::uint32_t(i);
      const float x = from_bits(u);
      const std::uint32_t got = bits(ours(f, x));
      std::uint32_t want = 0;
      bool boost = false;
      switch (wk.range.kind) {
        case Kind::kOracle:
          want = bits(oracle(f, x, &boost));
          ++oracle_calls;
          break;
        case Kind::kConstant: want = wk.range.value; break;
        case Kind::kIdentity: want = u; break;
        case Kind::kQuietNaN: want = u | 0x00400000u; break;
      }
      boost_calls += boost;
      ++checked;
      if (got != want) {
        ++mismatches;
#pragma omp critical
        if (s.first.size() < 20) {
          std::ostringstream o;
          o << name_of(f) << "(0x" << std::hex << i << " = " << std::hexfloat << x << "): got 0x" << got
            << " want 0x" << want << (boost ? " (Boost decided)" : "");
          s.first.push_back(o.str());
        }
      }
    }
  }
  s.checked = checked;
  s.oracle_calls = oracle_calls;
  s.boost_calls = boost_calls;
  s.mismatches = mismatches;
  return s;
}

void report(const Sweep& s) {
  for (const std::string& m : s.first) UNSCOPED_INFO(m);
  INFO("checked " << s.checked << ", oracle " << s.oracle_calls << ", decided by Boost " << s.boost_calls);
  CHECK(s.mismatches == 0);
}

void check_against_oracle(Fn f, float x) {
  INFO(name_of(f) << "(" << std::hexfloat << x << ")");
  CHECK(bits(ours(f, x)) == bits(round_big(big_eval(f, x))));
}

}  // namespace

TEST_CASE("fp32 math: special values from the spec", "[core][fp32_math]") {
  using core::exp_rn;
  using core::log_rn;
  using core::tanh_rn;
  CHECK(bits(exp_rn(0.0f)) == bits(1.0f));
  CHECK(bits(exp_rn(-0.0f)) == bits(1.0f));
  CHECK(bits(exp_rn(INFINITY)) == bits(INFINITY));
  CHECK(bits(exp_rn(-INFINITY)) == bits(0.0f));
  CHECK(bits(log_rn(1.0f)) == bits(0.0f));  // +0
  CHECK(bits(log_rn(0.0f)) == bits(-INFINITY));
  CHECK(bits(log_rn(-0.0f)) == bits(-INFINITY));
  CHECK(bits(log_rn(INFINITY)) == bits(INFINITY));
  CHECK(bits(log_rn(-1.0f)) == 0x7FC00000u);
  CHECK(bits(log_rn(-INFINITY)) == 0x7FC00000u);
  CHECK(bits(log_rn(-0x1p-149f)) == 0x7FC00000u);
  CHECK(bits(tanh_rn(0.0f)) == 0x00000000u);
  CHECK(bits(tanh_rn(-0.0f)) == 0x80000000u);
  CHECK(bits(tanh_rn(INFINITY)) == bits(1.0f));
  CHECK(bits(tanh_rn(-INFINITY)) == bits(-1.0f));
  CHECK(bits(tanh_rn(0x1p-149f)) == 0x00000001u);
  CHECK(bits(tanh_rn(-0x1p-149f)) == 0x80000001u);
  // NaN in: the same NaN, quiet (payload and sign kept).
  for (std::uint32_t n : {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFFA5A5A5u, 0x7FFFFFFFu}) {
    for (Fn f : {Fn::kExp, Fn::kLog, Fn::kTanh}) {
      INFO(name_of(f) << " 0x" << std::hex << n);
      CHECK(bits(ours(f, from_bits(n))) == (n | 0x00400000u));
    }
  }
}

TEST_CASE("fp32 math: values worked from the definition, checked against Boost", "[core][fp32_math]") {
  // e = 2.71828182845904523536...: the fp32 neighbours are 2.71828174591064453125 (0x402DF854,
  // 8.3e-8 below) and 2.7182819843292236328125 (0x402DF855, 1.6e-7 above).
  CHECK(bits(core::exp_rn(1.0f)) == 0x402DF854u);
  // ln 2 = 0.693147180559945309...: 0x3F317218 = 0.693147182464599609375 (1.9e-9 above; the
  // neighbour below is 5.8e-8 away).
  CHECK(bits(core::log_rn(2.0f)) == 0x3F317218u);
  // tanh 1 = 0.761594155955764888...: 0x3F42F7D6 = 0.76159417629241943359375 (2.0e-8 above; the
  // neighbour below is 3.9e-8 away).
  CHECK(bits(core::tanh_rn(1.0f)) == 0x3F42F7D6u);
  CHECK(bits(core::tanh_rn(-1.0f)) == 0xBF42F7D6u);
  check_against_oracle(Fn::kExp, 1.0f);
  check_against_oracle(Fn::kLog, 2.0f);
  check_against_oracle(Fn::kTanh, 1.0f);

  // Overflow of exp: ln(FLT_MAX + 2^103) = 88.7228391116729996...: 0x42B17217 = 88.72283172607421875
  // lies below it (finite result, FLT_MAX's neighbourhood), 0x42B17218 = 88.72283935546875 above
  // it (+Inf).
  const float below = from_bits(0x42B17217u), above = from_bits(0x42B17218u);
  CHECK(boost::multiprecision::exp(Big(below)) < Big(double(FLT_MAX)) + Big(0x1p103));
  CHECK(boost::multiprecision::exp(Big(above)) > Big(double(FLT_MAX)) + Big(0x1p103));
  CHECK(std::isfinite(core::exp_rn(below)));
  check_against_oracle(Fn::kExp, below);
  CHECK(bits(core::exp_rn(above)) == bits(INFINITY));

  // Subnormal and underflowing results of exp: ln(2^-150) = -103.97207708399179...: the fp32 just
  // above it gives the smallest subnormal 2^-149, the one just below gives +0.
  float u_above = -103.97207708399179f;  // the fp32 nearest the threshold, then the pair around it
  while (boost::multiprecision::exp(Big(u_above)) < Big(0x1p-150)) u_above = std::nextafter(u_above, 0.0f);
  while (boost::multiprecision::exp(Big(std::nextafter(u_above, -INFINITY))) > Big(0x1p-150))
    u_above = std::nextafter(u_above, -INFINITY);
  const float u_below = std::nextafter(u_above, -INFINITY);
  CHECK(boost::multiprecision::exp(Big(u_above)) > Big(0x1p-150));
  CHECK(boost::multiprecision::exp(Big(u_below)) < Big(0x1p-150));
  CHECK(bits(core::exp_rn(u_above)) == 0x00000001u);
  CHECK(bits(core::exp_rn(u_below)) == 0x00000000u);
  for (float x : {-87.5f, -88.0f, -90.0f, -95.5f, -100.0f, -102.25f, -103.5f, -103.9f})
    check_against_oracle(Fn::kExp, x);
  // log of subnormal inputs, of FLT_MAX, around 1.
  for (float x : {0x1p-149f, 0x1.8p-148f, 0x1.fffffcp-127f, FLT_MIN, FLT_MAX, std::nextafter(1.0f, 0.0f),
                  std::nextafter(1.0f, 2.0f), 0.70710677f, 0.70710683f, 1.4142135f, 1.4142137f})
    check_against_oracle(Fn::kLog, x);
  // tanh across its branches (1/8, 9.1) and near the threshold 2^-12.
  for (float x : {0x1p-12f, 0x1.000002p-12f, 0.1249999f, 0.125f, 0.5f, 3.0f, 8.99f, 9.1f})
    check_against_oracle(Fn::kTanh, x);
}

TEST_CASE("fp32 math: the trivial ranges of the exhaustive sweep hold", "[core][fp32_math]") {
  // exp is increasing: 1 at both ends of |x| < 2^-25 means 1 on all of it; +Inf at 89 means +Inf
  // above; +0 at -104 means +0 below.
  const float t = std::nextafter(0x1p-25f, 0.0f);
  CHECK(bits(round_big(big_eval(Fn::kExp, t))) == bits(1.0f));
  CHECK(bits(round_big(big_eval(Fn::kExp, -t))) == bits(1.0f));
  CHECK(bits(round_big(big_eval(Fn::kExp, std::nextafter(89.0f, INFINITY)))) == bits(INFINITY));
  CHECK(bits(round_big(big_eval(Fn::kExp, std::nextafter(-104.0f, -INFINITY)))) == bits(0.0f));
  // tanh is increasing and odd: 1 just above 9.1 means 1 above.
  CHECK(bits(round_big(big_eval(Fn::kTanh, std::nextafter(9.1f, INFINITY)))) == bits(1.0f));
  // tanh for 0 < x < 2^-12: x - x^3/3 < tanh x < x, and x^3/3 < x * 2^-24 / 3 is less than half
  // the gap below x (>= x * 2^-25, the gap halves only below a power of two): RN(tanh x) = x.
  // Checked for every binade's largest and smallest inputs with exact arithmetic.
  for (int e = -149; e < -12; ++e) {
    for (float x : {std::ldexp(1.0f, e), std::nextafter(std::ldexp(1.0f, e + 1), 0.0f)}) {
      const Big bx(x);
      const Big lower_mid = (bx + Big(std::nextafter(x, 0.0f))) / 2;
      INFO("x = " << std::hexfloat << x);
      CHECK(bx - bx * bx * bx / 3 > lower_mid);
    }
  }
}

TEST_CASE("fp32 math: the 2^(j/32) table against Boost", "[core][fp32_math]") {
  for (int j = 0; j < 32; ++j) {
    const core::math_detail::Pair p = core::math_detail::exp2_table(j);
    const Big want = boost::multiprecision::pow(Big(2), Big(j) / 32);
    INFO("j = " << j);
    CHECK(abs(Big(p.hi) + Big(p.lo) - want) < want * Big(0x1p-104));
    CHECK(double(Big(p.hi) + Big(p.lo)) == p.hi);  // normalised: |lo| <= ulp(hi) / 2
  }
}

TEST_CASE("fp32 math: 2^18 random inputs per function against the oracle", "[core][fp32_math]") {
  // A fast sample of the exhaustive sweeps (which the asan preset leaves out): random bit patterns,
  // and random inputs of each non-trivial range.
  std::mt19937 rng(20261201);
  for (Fn f : {Fn::kExp, Fn::kLog, Fn::kTanh}) {
    std::uint64_t mismatches = 0;
    for (int i = 0; i < (1 << 18); ++i) {
      float x = from_bits(std::uint32_t(rng()));
      if (i & 1) {
        const float span = f == Fn::kExp ? 104.0f : f == Fn::kLog ? 1.0f : 9.1f;
        x = std::uniform_real_distribution<float>(f == Fn::kLog ? 0.0f : -span, span)(rng);
        if (f == Fn::kLog) x = std::ldexp(x, int(rng() % 280) - 150);
      }
      const std::uint32_t want = nontrivial(f, x) ? bits(oracle(f, x)) : trivial_bits(f, x);
      if (bits(ours(f, x)) != want) {
        ++mismatches;
        UNSCOPED_INFO(name_of(f) << "(" << std::hexfloat << x << ")");
      }
    }
    CHECK(mismatches == 0);
  }
}

// The 2^32 sweeps, one test case per function (so ctest -j spreads them over the cores).
TEST_CASE("fp32 math: exp_rn is correctly rounded for all 2^32 inputs", "[core][fp32_math][exhaustive]") {
  report(sweep(Fn::kExp));
}
TEST_CASE("fp32 math: log_rn is correctly rounded for all 2^32 inputs", "[core][fp32_math][exhaustive]") {
  report(sweep(Fn::kLog));
}
TEST_CASE("fp32 math: tanh_rn is correctly rounded for all 2^32 inputs", "[core][fp32_math][exhaustive]") {
  report(sweep(Fn::kTanh));
}
