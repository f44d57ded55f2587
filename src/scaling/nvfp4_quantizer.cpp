// NVFP4 block scaling's quantizer (see include/fp8emu/scaling/nvfp4_quantizer.hpp).
#include "fp8emu/scaling/nvfp4_quantizer.hpp"

#include "fp8emu/core/philox.hpp"

namespace fp8emu::scaling {

namespace {
// The state as floats, each holding 16 bits exactly: seed then offset, low pieces first.
constexpr int kStatePieces = 4;
void put_u64(std::vector<float>& s, std::uint64_t v) {
  for (int i = 0; i < kStatePieces; ++i) s.push_back(float((v >> (16 * i)) & 0xFFFFu));
}
std::uint64_t get_u64(const float* s) {
  std::uint64_t v = 0;
  for (int i = 0; i < kStatePieces; ++i) {
    FP8EMU_CHECK(s[i] >= 0.0f && s[i] <= 65535.0f && float(int(s[i])) == s[i],
                 "NVFP4 quantizer: the checkpointed rounding state is corrupt (", s[i], " is no 16-bit piece)");
    v |= std::uint64_t(s[i]) << (16 * i);
  }
  return v;
}
}  // namespace

Nvfp4Quantizer::Nvfp4Quantizer(const NVFP4BlockScaling& recipe, Direction direction)
    : Quantizer(direction, (recipe.validate(), Format::kE2M1)), recipe_(recipe), seed_(recipe.seed) {}

void Nvfp4Quantizer::cast(const backend::Device& device, const float* x, int rows, int cols, TensorRole role,
                          DeviceOperand& out, backend::CastCounters* counters) {
  check_device_cast(out, rows, cols, role);
  const bool weight = role == TensorRole::kWeight;
  backend::BlockCast c = backend::BlockCast::nvfp4(format(), kNvfp4Block, weight && !recipe_.disable_2d_quantization);
  c.rht_columnwise = !weight && !recipe_.disable_rht;
  if (role == TensorRole::kGradOutput && !recipe_.disable_stochastic_rounding) {
    // TE (pytorch/csrc/quantizer.cpp) draws one rng state per quantize call, and a second one for
    // the column-wise launch that follows an unfused Hadamard transform.
    const bool col = out.has(Usage::kColumnwise), separate = c.rht_columnwise && col;
    c.stochastic_rounding = true;
    c.sr_seed = seed_;
    c.sr_offset_rowwise = offset_;
    c.sr_offset_columnwise = separate ? offset_ + core::kTeRngOffsetPerCast : offset_;
    c.sr_with_transpose = col && !c.rht_columnwise && out.has(Usage::kRowwise);
    offset_ += (separate ? 2 : 1) * core::kTeRngOffsetPerCast;
  }
  cast_blocks(device, c, x, rows, cols, out, counters);
}

void Nvfp4Quantizer::seed_rounding(std::uint64_t stream) { seed_ = recipe_.seed ^ stream; }

void Nvfp4Quantizer::set_rounding_state(std::uint64_t seed, std::uint64_t offset) {
  seed_ = seed;
  offset_ = offset;
}

std::vector<float> Nvfp4Quantizer::save_state() const {
  std::vector<float> s;
  put_u64(s, seed_);
  put_u64(s, offset_);
  return s;
}

void Nvfp4Quantizer::load_state(const std::vector<float>& state) {
  FP8EMU_CHECK(state.size() == 2 * kStatePieces, "NVFP4 quantizer: the checkpointed state has ", state.size(),
               " values, this quantizer keeps ", 2 * kStatePieces, " (its rounding seed and offset)");
  const std::uint64_t seed = get_u64(state.data()), offset = get_u64(state.data() + kStatePieces);
  seed_ = seed;
  offset_ = offset;
}

std::unique_ptr<Quantizer> NVFP4BlockScaling::make_quantizer(Direction direction) const {
  return std::make_unique<Nvfp4Quantizer>(*this, direction);
}

}  // namespace fp8emu::scaling
