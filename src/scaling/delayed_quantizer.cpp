// Delayed scaling's quantizer (see include/fp8emu/scaling/delayed_quantizer.hpp).
#include "fp8emu/scaling/delayed_quantizer.hpp"

#include <algorithm>

namespace fp8emu::scaling {

DelayedQuantizer::DelayedQuantizer(const DelayedScaling& recipe, Direction direction)
    : Quantizer(direction, cast_format(recipe, direction)),
      recipe_(recipe),
      state_(num_slots(direction), recipe.amax_history_len) {}

DelayedQuantizer::DelayedQuantizer(const DelayedQuantizer& o)
    : Quantizer(o), recipe_(o.recipe_), state_(o.state_), home_(o.home_) {
  if (!home_) return;
  scale_ = backend::DeviceTensor<float>(*home_, 1, state_.num_slots());
  history_ = backend::DeviceTensor<float>(*home_, state_.history_len(), state_.num_slots());
  home_->copy(scale_.get(), o.scale_.get(), scale_.bytes());
  home_->copy(history_.get(), o.history_.get(), history_.bytes());
}

std::string DelayedQuantizer::device_unsupported() const {
  if (!recipe_.uses_fused_update())
    return "uses delayed scaling with a callable amax or scale function (the unfused update), which runs on the host";
  if (recipe_.reduce_amax) return "uses delayed scaling with an amax-reduction hook, which runs on the host";
  return {};
}

void DelayedQuantizer::to_device(const backend::Device& device) {
  if (device.host_memory() || home_ == &device) return;
  to_host();
  const std::string why = device_unsupported();
  FP8EMU_CHECK(why.empty(), "delayed quantizer: its state cannot move to the ", device.name(), " device: it ", why);
  scale_ = backend::DeviceTensor<float>(device, 1, state_.num_slots());
  history_ = backend::DeviceTensor<float>(device, state_.history_len(), state_.num_slots());
  scale_.upload(state_.scales().data());
  history_.upload(state_.history_values().data());
  home_ = &device;
}

void DelayedQuantizer::to_host() {
  if (!home_) return;
  std::vector<float> scales(scale_.size()), history(history_.size());
  scale_.download(scales.data());
  history_.download(history.data());
  state_.restore(scales, history);
  scale_ = {};
  history_ = {};
  home_ = nullptr;
}

std::vector<float> DelayedQuantizer::save_state() const {
  std::vector<float> out(state_.scales().size() + state_.history_values().size());
  if (home_) {
    scale_.download(out.data());
    history_.download(out.data() + scale_.size());
  } else {
    std::copy(state_.scales().begin(), state_.scales().end(), out.begin());
    std::copy(state_.history_values().begin(), state_.history_values().end(),
              out.begin() + std::ptrdiff_t(state_.scales().size()));
  }
  return out;
}

void DelayedQuantizer::load_state(const std::vector<float>& state) {
  const std::size_t ns = state_.scales().size(), nh = state_.history_values().size();
  FP8EMU_CHECK(state.size() == ns + nh, "delayed scaling: the checkpointed quantizer state has ", state.size(),
               " values, this quantizer keeps ", ns + nh, " (", ns, " scales and amax_history_len ",
               state_.history_len(), " x ", state_.num_slots(), " slots)");
  const std::vector<float> scales(state.begin(), state.begin() + std::ptrdiff_t(ns)),
      history(state.begin() + std::ptrdiff_t(ns), state.end());
  if (home_) {
    scale_.upload(scales.data());
    history_.upload(history.data());
  } else {
    state_.restore(scales, history);
  }
}

void DelayedQuantizer::cast(const backend::Device& device, const float* x, int rows, int cols, TensorRole role,
                            DeviceOperand& out, backend::CastCounters* counters) {
  check_device_cast(out, rows, cols, role);
  const int slot = slot_of(role);
  if (home_ == &device || (!home_ && device.host_memory())) {
    // The state is where the cast runs: the slot's scale into the operand, the amax into history row 0.
    const float* scale = home_ ? scale_.get() + slot : state_.scales().data() + slot;
    float* amax = home_ ? history_.get() + slot : state_.amax_ptr(slot);
    device.copy(out.scale, scale, sizeof(float));
    cast_per_tensor(device, x, rows, cols, out, amax, counters);
    return;
  }
  FP8EMU_CHECK(!home_, "delayed quantizer: its state is on the ", home_->name(), " device, the cast on the ",
               device.name(), " device (move the state with to_host() or to_device())");
  // The state on the host, the cast on a device of its own memory: the scale goes up, the amax
  // comes back and is max-accumulated on the host (waits).
  const float scale = state_.scale(slot);
  device.upload(out.scale, &scale, sizeof(float));
  backend::DeviceTensor<float> amax(device, 1, 1);
  cast_per_tensor(device, x, rows, cols, out, amax.get(), counters);
  float a = 0.0f;
  amax.download(&a);
  state_.record_amax(slot, a);
}

void DelayedQuantizer::update_scales() {
  if (!home_) {
    state_.update(recipe_, format());
    return;
  }
  home_->delayed_update(history_.get(), scale_.get(), state_.num_slots(), state_.history_len(),
                        fused_scaled_max(recipe_, format()),
                        recipe_.amax_compute_algo == AmaxComputeAlgo::kMostRecent);
}

std::unique_ptr<Quantizer> DelayedScaling::make_quantizer(Direction direction) const {
  return std::make_unique<DelayedQuantizer>(*this, direction);
}

}  // namespace fp8emu::scaling
