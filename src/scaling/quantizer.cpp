// The Quantizer interface's shared parts: roles, the factory, the per-tensor cast and the FP8 GEMM
// of quantized operands (see include/fp8emu/scaling/quantizer.hpp).
#include "fp8emu/scaling/quantizer.hpp"

#include "fp8emu/core/e8m0.hpp"
#include "fp8emu/core/convert.hpp"
#include "fp8emu/scaling/mxfp8_quantizer.hpp"

#include <cmath>
#include <tuple>

#include "fp8emu/util/error.hpp"

namespace fp8emu::scaling {

int slot_of(TensorRole role) {
  switch (role) {
    case TensorRole::kInput: return 0;
    case TensorRole::kWeight: return 1;
    case TensorRole::kOutput: return 2;
    case TensorRole::kGradOutput: return 0;
    case TensorRole::kGradInput: return 1;
  }
  FP8EMU_FAIL("invalid TensorRole ", int(role));
}

Direction direction_of(TensorRole role) {
  switch (role) {
    case TensorRole::kInput:
    case TensorRole::kWeight:
    case TensorRole::kOutput: return Direction::kForward;
    case TensorRole::kGradOutput:
    case TensorRole::kGradInput: return Direction::kBackward;
  }
  FP8EMU_FAIL("invalid TensorRole ", int(role));
}

int num_slots(Direction d) { return d == Direction::kForward ? 3 : 2; }

void Quantizer::load_state(const std::vector<float>& state) {
  FP8EMU_CHECK(state.empty(), "quantizer: the checkpointed quantizer state has ", state.size(),
               " values, this recipe keeps none (its scales are computed at cast time)");
}

void Quantizer::check_cast(int rows, int cols, TensorRole role) const {
  FP8EMU_CHECK(rows >= 1 && cols >= 1, recipe_name(), " quantizer: sizes must be positive, got [", rows, ", ",
               cols, "]");
  FP8EMU_CHECK(direction_of(role) == direction_, recipe_name(), " quantizer: the ",
               direction_ == Direction::kForward ? "forward" : "backward",
               " quantizer casts only ", direction_ == Direction::kForward ? "input and weight" : "grad_output",
               " tensors");
}

// Each recipe record makes its own quantizer (defined beside it, in src/scaling/<name>_quantizer.cpp).
std::unique_ptr<Quantizer> make_quantizer(const Recipe& recipe, Direction direction) {
  return std::visit([direction](const auto& r) { return r.make_quantizer(direction); }, recipe);
}

std::size_t DeviceOperand::rowwise_scales() const {
  if (mode != ScalingMode::kBlock || !has(Usage::kRowwise) || block <= 0) return 0;
  return std::size_t(rows) * std::size_t((cols + block - 1) / block);
}

std::size_t DeviceOperand::columnwise_scales() const {
  if (mode != ScalingMode::kBlock || !has(Usage::kColumnwise) || block <= 0) return 0;
  return std::size_t(cols) * std::size_t((rows + block - 1) / block);
}

DeviceOperand device_operand(const Quantizer& q, int rows, int cols, TensorRole role, Usage usage) {
  FP8EMU_CHECK(rows >= 1 && cols >= 1, q.recipe_name(), " quantizer: sizes must be positive, got [", rows, ", ", cols,
               "]");
  DeviceOperand o;
  o.mode = q.scaling_mode();
  o.format = q.format();
  o.rows = rows;
  o.cols = cols;
  o.usage = usage;
  o.block = q.block_length(role);
  o.tensor_amax = q.has_tensor_amax(role);
  return o;
}

namespace {

// MXFP8's E8M0 codes of a block view from its scale_inv (powers of two 2^(e - 127): the conversion
// is exact). No-op for other block lengths.
void set_e8m0(emu::BlockQuantized& b) {
  if (b.block != kMxfp8Block) return;
  b.e8m0.resize(b.scale_inv.size());
  for (std::size_t i = 0; i < b.e8m0.size(); ++i)
    b.e8m0[i] = core::e8m0_round_up_from_f32_bits(core::f32_to_bits(b.scale_inv[i]));
}

// A block view's record for n rows of k codes, sized and zero-filled.
emu::BlockQuantized block_record(int n, int k, int block, Format format) {
  emu::BlockQuantized b;
  b.n = n;
  b.k = k;
  b.block = block;
  b.format = format;
  b.codes.resize(std::size_t(n) * std::size_t(k));
  b.scale_inv.resize(std::size_t(n) * std::size_t(b.blocks()));
  return b;
}

}  // namespace

DeviceQuantizedTensor::DeviceQuantizedTensor(const backend::Device& device, const DeviceOperand& description)
    : device_(&device), op_(description) {
  using backend::DeviceTensor;
  FP8EMU_CHECK(op_.codes() <= std::size_t(0x7FFFFFFF), "device operand: [", op_.rows, ", ", op_.cols,
               "] exceeds 2^31 - 1 elements");
  if (op_.has(Usage::kRowwise)) {
    rowwise_ = DeviceTensor<std::uint8_t>(device, op_.rows, op_.cols);
    op_.rowwise_data = rowwise_.get();
  }
  if (op_.has(Usage::kColumnwise)) {
    columnwise_ = DeviceTensor<std::uint8_t>(device, op_.cols, op_.rows);
    op_.columnwise_data = columnwise_.get();
  }
  if (op_.mode == ScalingMode::kPerTensor) {
    scale_ = DeviceTensor<float>(device, 1, 1);
    op_.scale = scale_.get();
  } else {
    if (op_.rowwise_scales() > 0) {
      rowwise_scale_inv_ = DeviceTensor<float>(device, 1, int(op_.rowwise_scales()));
      op_.rowwise_scale_inv = rowwise_scale_inv_.get();
    }
    if (op_.columnwise_scales() > 0) {
      columnwise_scale_inv_ = DeviceTensor<float>(device, 1, int(op_.columnwise_scales()));
      op_.columnwise_scale_inv = columnwise_scale_inv_.get();
    }
    if (op_.tensor_amax) {
      amax_ = DeviceTensor<float>(device, 1, 2);
      op_.rowwise_amax = amax_.get();
      op_.columnwise_amax = amax_.get() + 1;
    }
  }
}

QuantizedTensor DeviceQuantizedTensor::download() const {
  FP8EMU_CHECK(device_ != nullptr, "device operand: download of an empty DeviceQuantizedTensor");
  QuantizedTensor q;
  q.format = op_.format;
  q.rows = op_.rows;
  q.cols = op_.cols;
  q.usage = op_.usage;
  if (op_.mode == ScalingMode::kPerTensor) {
    PerTensorStorage& p = q.storage.emplace<PerTensorStorage>();
    if (op_.has(Usage::kRowwise)) {
      p.rowwise_data.resize(op_.codes());
      rowwise_.download(p.rowwise_data.data());
    }
    if (op_.has(Usage::kColumnwise)) {
      p.columnwise_data.resize(op_.codes());
      columnwise_.download(p.columnwise_data.data());
    }
    scale_.download(&p.scale);
    p.scale_inv = emu::scale_inv_of(p.scale);
    return q;
  }
  // One block view as emu::BlockQuantized holds it: n rows of k codes, ceil(k / block) scales each.
  float amax[2] = {0.0f, 0.0f};
  if (op_.tensor_amax) amax_.download(amax);
  const auto view = [&](const backend::DeviceTensor<std::uint8_t>& codes, const backend::DeviceTensor<float>& si,
                        int n, int k, float tensor_amax) {
    emu::BlockQuantized b;
    b.n = n;
    b.k = k;
    b.block = op_.block;
    b.format = op_.format;
    b.codes.resize(std::size_t(n) * std::size_t(k));
    codes.download(b.codes.data());
    b.scale_inv.resize(si.size());
    si.download(b.scale_inv.data());
    if (op_.tensor_amax) b.amax = tensor_amax;
    set_e8m0(b);
    return b;
  };
  BlockStorage& b = q.storage.emplace<BlockStorage>();
  if (op_.has(Usage::kRowwise)) b.rowwise = view(rowwise_, rowwise_scale_inv_, op_.rows, op_.cols, amax[0]);
  if (op_.has(Usage::kColumnwise))
    b.columnwise = view(columnwise_, columnwise_scale_inv_, op_.cols, op_.rows, amax[1]);
  return q;
}

namespace {

// `out` is the operand this cast writes: its description matches, and its buffers are set.
void check_device_operand(const DeviceOperand& out, ScalingMode mode, Format format, int rows, int cols, int block,
                          const char* who) {
  FP8EMU_CHECK(out.mode == mode && out.format == format && out.rows == rows && out.cols == cols && out.block == block,
               who, ": the device operand does not describe this cast (make it with scaling::device_operand for the "
               "same shape, role and usage)");
  FP8EMU_CHECK(out.has(Usage::kRowwise) || out.has(Usage::kColumnwise), who, ": the device operand asks for no copy");
  const bool row = out.has(Usage::kRowwise), col = out.has(Usage::kColumnwise);
  FP8EMU_CHECK((!row || out.rowwise_data) && (!col || out.columnwise_data), who,
               ": the device operand has no buffer for the ", row && !out.rowwise_data ? "row-wise" : "column-wise",
               " codes");
  if (mode == ScalingMode::kPerTensor)
    FP8EMU_CHECK(out.scale != nullptr, who, ": the device operand has no buffer for the scale");
  else
    FP8EMU_CHECK((!row || out.rowwise_scale_inv) && (!col || out.columnwise_scale_inv), who,
                 ": the device operand has no buffer for the ", row && !out.rowwise_scale_inv ? "row-wise" : "column-wise",
                 " scale_inv");
  if (out.tensor_amax)
    FP8EMU_CHECK((!row || out.rowwise_amax) && (!col || out.columnwise_amax), who,
                 ": the device operand has no buffer for the ", row && !out.rowwise_amax ? "row-wise" : "column-wise",
                 " tensor amax");
}


}  // namespace

void Quantizer::check_device_cast(const DeviceOperand& out, int rows, int cols, TensorRole role) const {
  check_cast(rows, cols, role);
  check_device_operand(out, scaling_mode(), format(), rows, cols, block_length(role), recipe_name());
}

void cast_per_tensor(const backend::Device& device, const float* x, int rows, int cols, DeviceOperand& out,
                     float* amax, backend::CastCounters* counters) {
  FP8EMU_CHECK(rows >= 1 && cols >= 1, "per-tensor cast: sizes must be positive, got [", rows, ", ", cols, "]");
  check_device_operand(out, ScalingMode::kPerTensor, out.format, rows, cols, 0, "per-tensor cast");
  device.cast_transpose(x, rows, cols, out.scale, out.format, out.has(Usage::kRowwise) ? out.rowwise_data : nullptr,
                        out.has(Usage::kColumnwise) ? out.columnwise_data : nullptr, amax, counters);
}

void cast_blocks(const backend::Device& device, const backend::BlockCast& cast, const float* x, int rows, int cols,
                 DeviceOperand& out, backend::CastCounters* counters) {
  const backend::BlockView row =
      out.has(Usage::kRowwise) ? backend::BlockView{out.rowwise_data, out.rowwise_scale_inv, out.rowwise_amax}
                               : backend::BlockView{};
  const backend::BlockView col =
      out.has(Usage::kColumnwise) ? backend::BlockView{out.columnwise_data, out.columnwise_scale_inv, out.columnwise_amax}
                                  : backend::BlockView{};
  device.block_cast(cast, x, rows, cols, row, col, counters);
}

const PerTensorStorage& QuantizedTensor::per_tensor() const {
  const auto* p = std::get_if<PerTensorStorage>(&storage);
  FP8EMU_CHECK(p, "quantized tensor: block-scaled, not per-tensor");
  return *p;
}
PerTensorStorage& QuantizedTensor::per_tensor() {
  return const_cast<PerTensorStorage&>(static_cast<const QuantizedTensor&>(*this).per_tensor());
}
const BlockStorage& QuantizedTensor::blocks() const {
  const auto* b = std::get_if<BlockStorage>(&storage);
  FP8EMU_CHECK(b, "quantized tensor: per-tensor, not block-scaled");
  return *b;
}
BlockStorage& QuantizedTensor::blocks() {
  return const_cast<BlockStorage&>(static_cast<const QuantizedTensor&>(*this).blocks());
}

DeviceOperand host_view(const QuantizedTensor& t) {
  DeviceOperand o;
  o.mode = t.mode();
  o.format = t.format;
  o.rows = t.rows;
  o.cols = t.cols;
  o.usage = t.usage;
  auto& m = const_cast<QuantizedTensor&>(t);
  if (auto* p = std::get_if<PerTensorStorage>(&m.storage)) {
    if (t.has(Usage::kRowwise)) o.rowwise_data = p->rowwise_data.data();
    if (t.has(Usage::kColumnwise)) o.columnwise_data = p->columnwise_data.data();
    o.scale = &p->scale;
    o.host_scale = p->scale;
    o.host_scale_inv = p->scale_inv;
    return o;
  }
  BlockStorage& b = m.blocks();
  o.block = t.has(Usage::kRowwise) ? b.rowwise.block : b.columnwise.block;
  if (t.has(Usage::kRowwise)) {
    o.rowwise_data = b.rowwise.codes.data();
    o.rowwise_scale_inv = b.rowwise.scale_inv.data();
    if (b.rowwise.amax) o.rowwise_amax = &*b.rowwise.amax;
  }
  if (t.has(Usage::kColumnwise)) {
    o.columnwise_data = b.columnwise.codes.data();
    o.columnwise_scale_inv = b.columnwise.scale_inv.data();
    if (b.columnwise.amax) o.columnwise_amax = &*b.columnwise.amax;
  }
  o.tensor_amax = o.rowwise_amax || o.columnwise_amax;
  return o;
}

QuantizedTensor host_quantized_tensor(const DeviceOperand& desc) {
  QuantizedTensor q;
  q.format = desc.format;
  q.rows = desc.rows;
  q.cols = desc.cols;
  q.usage = desc.usage;
  const std::size_t n = desc.codes();
  if (desc.mode == ScalingMode::kPerTensor) {
    PerTensorStorage& p = q.storage.emplace<PerTensorStorage>();
    if (q.has(Usage::kRowwise)) p.rowwise_data.resize(n);
    if (q.has(Usage::kColumnwise)) p.columnwise_data.resize(n);
  } else {
    BlockStorage& b = q.storage.emplace<BlockStorage>();
    if (q.has(Usage::kRowwise)) b.rowwise = block_record(desc.rows, desc.cols, desc.block, desc.format);
    if (q.has(Usage::kColumnwise)) b.columnwise = block_record(desc.cols, desc.rows, desc.block, desc.format);
    if (desc.tensor_amax) {  // the slots the cast writes the tensor amax into
      if (q.has(Usage::kRowwise)) b.rowwise.amax = 0.0f;
      if (q.has(Usage::kColumnwise)) b.columnwise.amax = 0.0f;
    }
  }
  return q;
}

void finish_host_cast(QuantizedTensor& t) {
  if (auto* p = std::get_if<PerTensorStorage>(&t.storage)) {
    p->scale_inv = emu::scale_inv_of(p->scale);
    return;
  }
  BlockStorage& b = t.blocks();
  if (t.has(Usage::kRowwise)) set_e8m0(b.rowwise);
  if (t.has(Usage::kColumnwise)) set_e8m0(b.columnwise);
}

void Quantizer::quantize_device(const backend::Device& device, const float* x, int rows, int cols, TensorRole role,
                                DeviceOperand& out, emu::QuantizeStats* stats) {
  backend::DeviceTensor<backend::CastCounters> counters(device, 1, 1);
  cast(device, x, rows, cols, role, out, counters.get());
  backend::CastCounters c;
  counters.download(&c);  // waits for the cast
  if (stats) *stats += backend::stats_of(c);
  download_host_scale(device, out);
}

void download_host_scale(const backend::Device& device, DeviceOperand& op) {
  if (op.mode != ScalingMode::kPerTensor) return;
  float s = 0.0f;
  device.download(&s, op.scale, sizeof(float));  // waits for the cast
  op.host_scale = s;
  op.host_scale_inv = emu::scale_inv_of(s);
}

namespace {
const char* usage_name(Usage u) { return u == Usage::kRowwise ? "row-wise" : "column-wise"; }

// A host QuantizedTensor or a DeviceOperand: the copy read is one the operand has.
template <class Operand>
void check_operand(const Operand& t, Usage u, const char* which) {
  FP8EMU_CHECK(u == Usage::kRowwise || u == Usage::kColumnwise, "gemm_tn: operand ", which,
               " must be read row-wise or column-wise");
  FP8EMU_CHECK(t.has(u), "gemm_tn: operand ", which, " has no ", usage_name(u), " copy (quantize it with that usage)");
}
}  // namespace

void check_gemm_tn(const DeviceOperand& a, Usage a_usage, const DeviceOperand& b, Usage b_usage,
                   const emu::GemmAccumulation& acc) {
  check_operand(a, a_usage, "A");
  check_operand(b, b_usage, "B");
  FP8EMU_CHECK(a.mode == b.mode, "gemm_tn: the operands have different scaling modes");
  const bool a_row = a_usage == Usage::kRowwise, b_row = b_usage == Usage::kRowwise;
  const int M = a_row ? a.rows : a.cols, K = a_row ? a.cols : a.rows;
  const int N = b_row ? b.rows : b.cols, KB = b_row ? b.cols : b.rows;
  FP8EMU_CHECK(K == KB, "gemm_tn: K differs, ", K, " for A and ", KB, " for B");
  if (a.mode == ScalingMode::kPerTensor) {
    emu::check_gemm_tn(M, N, K, a.format, b.format, acc);
    return;
  }
  FP8EMU_CHECK(a.block == b.block, "gemm_tn: the operands' block lengths differ, ", a.block, " and ", b.block);
  FP8EMU_CHECK(a.block >= 1, "gemm_tn: a block operand's block length must be >= 1, got ", a.block);
  emu::require_block_element(a.format, "block-scaled GEMM operand A");
  emu::require_block_element(b.format, "block-scaled GEMM operand B");
  FP8EMU_CHECK(a.tensor_amax == b.tensor_amax, "gemm_tn: operand ", a.tensor_amax ? "A" : "B",
               " has NVFP4 scales under a tensor amax and operand ", a.tensor_amax ? "B" : "A", " has none");
  emu::check_block_accumulation(acc);
}

void gemm_tn(const backend::Device& device, const DeviceOperand& a, Usage a_usage, const DeviceOperand& b,
             Usage b_usage, const emu::GemmAccumulation& acc, float* d) {
  check_gemm_tn(a, a_usage, b, b_usage, acc);
  for (const auto& [t, u, which] : {std::tuple<const DeviceOperand&, Usage, const char*>{a, a_usage, "A"},
                                    {b, b_usage, "B"}})
    FP8EMU_CHECK(u == Usage::kRowwise ? t.rowwise_data != nullptr : t.columnwise_data != nullptr, "gemm_tn: operand ",
                 which, " has no buffer for its ", usage_name(u), " codes");
  const bool a_row = a_usage == Usage::kRowwise, b_row = b_usage == Usage::kRowwise;
  const int M = a_row ? a.rows : a.cols, K = a_row ? a.cols : a.rows;
  const int N = b_row ? b.rows : b.cols;
  const std::uint8_t* qa = a_row ? a.rowwise_data : a.columnwise_data;
  const std::uint8_t* qb = b_row ? b.rowwise_data : b.columnwise_data;
  switch (a.mode) {
    case ScalingMode::kPerTensor:
      FP8EMU_CHECK(a.scale && b.scale, "gemm_tn: a per-tensor device operand has no scale");
      device.gemm_fp8_tn(M, N, K, qa, a.format, a.scale, qb, b.format, b.scale, acc, d);
      return;
    case ScalingMode::kBlock: {
      const float* sa = a_row ? a.rowwise_scale_inv : a.columnwise_scale_inv;
      const float* sb = b_row ? b.rowwise_scale_inv : b.columnwise_scale_inv;
      FP8EMU_CHECK(sa && sb, "gemm_tn: a block device operand has no scale_inv for the copy read");
      const float* amax_a = a.tensor_amax ? (a_row ? a.rowwise_amax : a.columnwise_amax) : nullptr;
      const float* amax_b = b.tensor_amax ? (b_row ? b.rowwise_amax : b.columnwise_amax) : nullptr;
      FP8EMU_CHECK(a.tensor_amax == (amax_a != nullptr) && b.tensor_amax == (amax_b != nullptr),
                   "gemm_tn: an NVFP4 device operand has no tensor amax for the copy read");
      device.gemm_fp8_block_tn(M, N, K, a.block, qa, a.format, sa, qb, b.format, sb, amax_a, amax_b, acc, d);
      return;
    }
  }
  FP8EMU_FAIL("gemm_tn: invalid scaling mode");
}

namespace {

// A host operand copied into a device's memory.
DeviceQuantizedTensor upload_operand(const backend::Device& device, const QuantizedTensor& t) {
  const DeviceOperand h = host_view(t);
  DeviceOperand desc = h;
  desc.rowwise_data = desc.columnwise_data = nullptr;
  desc.scale = desc.rowwise_scale_inv = desc.columnwise_scale_inv = nullptr;
  desc.rowwise_amax = desc.columnwise_amax = nullptr;
  DeviceQuantizedTensor d(device, desc);
  DeviceOperand& o = d.operand();
  if (h.rowwise_data) device.upload(o.rowwise_data, h.rowwise_data, h.codes());
  if (h.columnwise_data) device.upload(o.columnwise_data, h.columnwise_data, h.codes());
  if (h.scale) device.upload(o.scale, h.scale, sizeof(float));
  if (h.rowwise_scale_inv) device.upload(o.rowwise_scale_inv, h.rowwise_scale_inv, h.rowwise_scales() * sizeof(float));
  if (h.columnwise_scale_inv)
    device.upload(o.columnwise_scale_inv, h.columnwise_scale_inv, h.columnwise_scales() * sizeof(float));
  if (h.rowwise_amax) device.upload(o.rowwise_amax, h.rowwise_amax, sizeof(float));
  if (h.columnwise_amax) device.upload(o.columnwise_amax, h.columnwise_amax, sizeof(float));
  return d;
}

}  // namespace

QuantizedTensor Quantizer::quantize(const backend::Device& device, const float* x, int rows, int cols, TensorRole role,
                                    Usage usage, emu::QuantizeStats* stats) {
  check_cast(rows, cols, role);
  const DeviceOperand desc = device_operand(*this, rows, cols, role, usage);
  if (!device.host_memory()) {  // x up, the cast on the device, the operand down
    backend::DeviceTensor<float> xd(device, rows, cols);
    xd.upload(x);
    DeviceQuantizedTensor d(device, desc);
    quantize_device(device, xd.get(), rows, cols, role, d.operand(), stats);
    return d.download();
  }
  // A host-memory device writes straight into the operand's buffers.
  QuantizedTensor q = host_quantized_tensor(desc);
  DeviceOperand out = host_view(q);
  out.block = desc.block;  // also for a usage with no copy, so the cast's own check names it
  quantize_device(device, x, rows, cols, role, out, stats);
  finish_host_cast(q);
  return q;
}

void gemm_tn(const backend::Device& device, const QuantizedTensor& a, Usage a_usage, const QuantizedTensor& b,
             Usage b_usage, const emu::GemmAccumulation& acc, float* d) {
  check_operand(a, a_usage, "A");
  check_operand(b, b_usage, "B");
  if (device.host_memory()) {
    gemm_tn(device, host_view(a), a_usage, host_view(b), b_usage, acc, d);
    return;
  }
  // Operands up, the GEMM on the device, D down.
  const DeviceQuantizedTensor ad = upload_operand(device, a), bd = upload_operand(device, b);
  const int M = a_usage == Usage::kRowwise ? a.rows : a.cols, N = b_usage == Usage::kRowwise ? b.rows : b.cols;
  backend::DeviceTensor<float> dd(device, M, N);
  gemm_tn(device, ad.operand(), a_usage, bd.operand(), b_usage, acc, dd.get());
  dd.download(d);
}

}  // namespace fp8emu::scaling
