// The flags of the training commands (see run_flags.hpp).
#include "run_flags.hpp"

#include <memory>
#include <string>

#include "commands.hpp"
#include "fp8emu/emulation/gemm_models.hpp"

namespace fp8emu::cli {

std::function<void()> add_run_flags(CLI::App* cmd, experiments::common::RunConfig& cfg, const RunFlagWords& words) {
  struct Named {
    std::string algo = "max", mx_rule = "te";
    bool unfused = false, quiet = false, fnuz = false;
  };
  auto n = std::make_shared<Named>();
  scaling::RecipeSet& recipes = cfg.recipes;
  auto& delayed = recipes.get<scaling::DelayedScaling>();
  auto& current = recipes.get<scaling::CurrentScaling>();
  cmd->add_option("--out", cfg.out_dir, "Output folder (default " + words.out_default + ")");
  cmd->add_option("--resume", cfg.resume,
                  "Continue the interrupted run whose checkpoint.bin is in this folder (same flags as that run)");
  cmd->add_option("--seed", cfg.seed, "Seed of the initial weights and the batches")
      ->check(CLI::Validator(
          [](std::string& v) { return !v.empty() && v[0] == '-' ? "must be >= 0, got " + v : std::string(); }, ""))
      ->capture_default_str();
  cmd->add_option("--threads", cfg.threads, "OpenMP threads (0: OpenMP default)")->capture_default_str();
  cmd->add_option("--recipe", cfg.recipe, "FP8 recipe: " + recipe_list() + ", or all (FP32 and every recipe)")
      ->capture_default_str();
  cmd->add_option("--format", cfg.format,
                  "FP8 formats for every recipe: hybrid (E4M3 fwd, E5M2 bwd) or e4m3 "
                  "(default: TE's per recipe, hybrid for delayed/current, e4m3 for mxfp8/block; nvfp4's formats "
                  "are fixed: E2M1 elements, E4M3 block scales)");
  cmd->add_option("--amax-history-len", delayed.amax_history_len, "Delayed scaling amax_history_len")
      ->capture_default_str();
  cmd->add_option("--amax-compute-algo", n->algo, "Delayed scaling amax_compute_algo: max or most_recent")
      ->capture_default_str();
  cmd->add_option("--margin", delayed.margin, "Delayed scaling margin")->capture_default_str();
  cmd->add_flag("--unfused-update", n->unfused, "Delayed scaling: TE's unfused (Python) update path");
  cmd->add_flag("--pow2", current.use_power_2_scales, "Current scaling: power-of-2 scales");
  cmd->add_flag("--fnuz", n->fnuz,
                "Delayed and current scaling: ROCm TE's FP8 types on MI300, E4M3FNUZ (max 240) and E5M2FNUZ (CPU "
                "backends)");
  cmd->add_option("--amax-epsilon", current.amax_epsilon, "Current and block scaling amax_epsilon")
      ->capture_default_str();
  cmd->add_flag("--block-f32-scales", recipes.get<scaling::Float8BlockScaling>().use_f32_scales,
                "Block scaling: plain fp32 scales instead of powers of 2");
  cmd->add_flag("--block-mxfp8-gemms", recipes.get<scaling::Float8BlockScaling>().mxfp8_gemms,
                "Block scaling: GEMMs as TE runs them on Blackwell (scales to E8M0 on 1 x 32 blocks, MXFP8 GEMMs)");
  cmd->add_option("--mxfp8-rule", n->mx_rule, "MXFP8 E8M0 scale rule: te (round up), ocp (floor) or even (torchao's EVEN: amax rounded to the element precision, then floor)")
      ->capture_default_str();
  auto& nvfp4 = recipes.get<scaling::NVFP4BlockScaling>();
  cmd->add_flag("--nvfp4-no-rht", nvfp4.disable_rht,
                "NVFP4: no random Hadamard transform of the wgrad operands (TE disable_rht)");
  cmd->add_flag("--nvfp4-no-sr", nvfp4.disable_stochastic_rounding,
                "NVFP4: gradients rounded to nearest, not stochastically (TE disable_stochastic_rounding)");
  cmd->add_flag("--nvfp4-no-2d", nvfp4.disable_2d_quantization,
                "NVFP4: weights in 1 x 16 blocks instead of 16 x 16 tiles (TE disable_2d_quantization)");
  cmd->add_option("--accumulation", cfg.accumulation,
                  "FP8 GEMM accumulation (delayed/current): " + emu::accumulation_names() + " (TE's fast/split wrappers)")
      ->capture_default_str();
  cmd->add_option("--backend", cfg.backend,
                  "Where the Linear layers run: emulated, cuda (falls back to emulated without a usable GPU) or "
                  "reference (FP32); for all layers or per layer, e.g. " + words.layer_example)
      ->capture_default_str();
  cmd->add_flag("--strict", cfg.strict, "With --backend cuda: fail instead of falling back to the emulator");
  cmd->add_option("--resident", cfg.resident,
                  "Keep each run's model and optimizer state on the device between steps: auto (on the GPU when "
                  "every layer runs on cuda), on (also on the CPU with --backend emulated: the same step program), "
                  "off. Same results")
      ->capture_default_str();
  cmd->add_flag("--bf16", cfg.bf16_baseline,
                "Also train a BF16 run (every Linear with bf16 operands and outputs, fp32 accumulation), the "
                "baseline FP8 is measured against");
  cmd->add_option("--bf16-accumulation", cfg.bf16_accumulation,
                  "How the BF16 run's GEMMs sum: fp32 (sequential) or a bf16 tensor core: ampere-bf16, ada-bf16, "
                  "hopper-bf16, blackwell-bf16 (docs/tensor-core-model.md)")
      ->capture_default_str();
  cmd->add_option("--fp32-accumulation", cfg.fp32_accumulation,
                  "How the FP32 run's GEMMs run: fp32 or, as PyTorch's allow_tf32, a tf32 tensor core: ampere-tf32, "
                  "ada-tf32, hopper-tf32, blackwell-tf32 (operands rounded to tf32)")
      ->capture_default_str();
  cmd->add_option("--lr", cfg.lr, "Learning rate")->capture_default_str();
  cmd->add_option("--checkpoint-every", cfg.checkpoint_every,
                  "Write <out>/checkpoint.bin every N " + words.step + " and at the end of each run (0: never)")
      ->capture_default_str();
  cmd->add_option("--dp-shards", cfg.dp_shards,
                  "Data parallelism: cut " + words.batch + " into S fixed shards (each with its own casts and "
                  "scales); mpirun -np N with N dividing S gives the same bits for every N")
      ->capture_default_str();
  cmd->add_option("--amax-reduction", cfg.amax_reduction,
                  "Delayed scaling's amax-reduction group over the shards: dp (all, TE's default), none (each "
                  "shard its own amax and scale) or group=K (K consecutive shards)")
      ->capture_default_str();
  cmd->add_flag("--quiet", n->quiet, "No progress output");
  return [n, &cfg] {
    scaling::RecipeSet& r = cfg.recipes;
    auto& d = r.get<scaling::DelayedScaling>();
    d.fused_update = !n->unfused;
    d.amax_compute_algo = scaling::parse_amax_compute_algo(n->algo, "--amax-compute-algo");
    d.fnuz = r.get<scaling::CurrentScaling>().fnuz = n->fnuz;
    FP8EMU_CHECK(!n->fnuz || cfg.recipe == "all" || cfg.recipe == "delayed" || cfg.recipe == "current",
                 "--fnuz is a switch of the per-tensor recipes (delayed, current), not of --recipe ", cfg.recipe);
    FP8EMU_CHECK(!r.get<scaling::Float8BlockScaling>().mxfp8_gemms || cfg.recipe == "all" || cfg.recipe == "block",
                 "--block-mxfp8-gemms is a switch of --recipe block, not of --recipe ", cfg.recipe);
    r.get<scaling::Float8BlockScaling>().amax_epsilon = r.get<scaling::CurrentScaling>().amax_epsilon;
    r.get<scaling::MXFP8BlockScaling>().rule = scaling::parse_e8m0_rule(n->mx_rule, "--mxfp8-rule");
    r.get<scaling::NVFP4BlockScaling>().seed = cfg.seed;  // the Philox seed of stochastic rounding
    cfg.progress = !n->quiet;
  };
}

}  // namespace fp8emu::cli
