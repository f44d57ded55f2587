"""Transformer Engine's FP8 Linear and LayerNormLinear as functions, usable from any framework.

The three GEMMs of a Linear layer ``y = x W^T + b`` on FP8 operands, with the quantizers' state
(delayed scaling's amax history and scales) held by the caller's :class:`fp8emu.Quantizer` objects,
exactly as fp8emu's C++ ``nn::Linear`` runs them (``src/nn/linear.cpp``; TE
``pytorch/module/linear.py``)::

    fwd, bwd = fp8emu.Quantizer(recipe, "forward"), fp8emu.Quantizer(recipe, "backward")
    y, saved = fp8emu.layers.linear_forward(x, w, b, fwd)          # fprop
    fwd.update_scales()                                            # TE: at fp8_autocast exit
    dx, dw, db = fp8emu.layers.linear_backward(dy, saved, bwd)     # dgrad, wgrad, bias grad
    bwd.update_scales()                                            # TE: at the end of the backward

- fprop ``y = x W^T + b``: x cast row-wise (and column-wise in training, for wgrad) with the
  ``input`` role, W row- and column-wise with the ``weight`` role, in the recipe's forward format
  (E4M3); the bias, rounded to bf16 as TE casts it for the FP8 GEMM, is added to the fp32 GEMM
  result (one fp32 add per element: ``RN(y + bf16(b))``).
- dgrad ``dx = dy W``: dy cast with the ``grad_output`` role in the backward format (E5M2 under
  ``Format.HYBRID``), W's column-wise copy.
- wgrad ``dW = dy^T x``: the column-wise copies of dy and x.
- bias grad ``db``: the sum over rows of the fp32 dy, in row order from +0 (TE takes it from the
  unquantized gradient).
Accumulation: per-tensor recipes (delayed, current) run the Hopper tensor-core model, fast
accumulation in fprop (``promotion=0``), promoted to fp32 every 128 K-elements in dgrad and wgrad
(TE's cuBLASLt settings on Hopper, ``emu::te_fprop/te_dgrad/te_wgrad``); block recipes (MXFP8,
128-block) accumulate in fp32 per block. Every cast rounds to nearest even and saturates
(``__NV_SATFINITE``).

Arrays: float32 NumPy arrays (or CPU DLPack arrays) in any layout (a strided host view is copied to
C order; the results do not depend on it); x is (rows, in_features), W (out_features,
in_features), b (out_features,) or None. Results are new float32 NumPy arrays. Every check
(types, sides, shapes, the accumulation, the operands' modes and formats) runs before the first
cast, so a call that raises leaves the quantizers' state as it was.

The Linear's step is fp8emu's C++ program, not a Python composition: ``linear_forward`` and
``linear_backward`` run ``nn::fp8_linear_fprop`` / ``nn::fp8_linear_backward``
(``include/fp8emu/nn/linear_step.hpp``), the functions ``nn::Linear`` runs, on the device of the
arrays given.

On the GPU: every function here but :func:`round_to_bf16` also takes float32 CUDA arrays (PyTorch
CUDA tensors, CuPy, JAX GPU arrays; all on fp8emu's GPU, in a build with CUDA): the Linear's step,
the bias-grad sum and the norm then run there (the same step program, ``Device::column_sum``,
``Device::norm_forward`` / ``norm_backward`` and ``round_bf16`` on ``backend::cuda_device()``),
with the same bits as on the CPU, and the results are CUDA arrays of the input's framework. The
quantizers' state stays on the host, as TE keeps its recipe state. Each call waits for the input's
framework's current stream first and returns when its results are complete.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Tuple

import numpy as np

from . import _cuda, _fp8emu
from .recipe import QuantizedTensor, Quantizer

__all__ = ["LinearSaved", "linear_forward", "linear_backward", "bias_grad", "LayerNormSaved",
           "layernorm_linear_forward", "layernorm_linear_backward", "round_to_bf16"]


def _f32_2d(x: Any, what: str, ndim: int = 2) -> np.ndarray:
    """x as a float32 array of `ndim` dimensions: a CUDA array as it is (the extension checks it), a
    host one copied to C order when strided; TypeError / ValueError naming `what` otherwise."""
    if _cuda.is_cuda(x):  # the GPU path: the extension checks dtype, shape and layout where it reads x
        return x
    dev = getattr(x, "__dlpack_device__", None)
    if dev is not None and not isinstance(x, np.ndarray) and dev()[0] not in (1, 3):  # kDLCPU, kDLCUDAHost
        raise TypeError(f"{what} is an array on DLPack device type {dev()[0]}; fp8emu.layers takes host arrays, "
                        f"or CUDA arrays on fp8emu's GPU")
    a = np.asarray(x)
    if a.dtype != np.float32:
        raise TypeError(f"{what} has dtype {a.dtype}; it must be float32")
    if a.ndim != ndim:
        raise ValueError(f"{what} has {a.ndim} dimensions; expected {ndim}")
    return np.ascontiguousarray(a)


def _accumulation(q: Quantizer, accumulation: Optional[str]) -> str:
    if accumulation is not None:
        return accumulation
    return "hopper" if q.supports_accumulation_models else "fp32"


def _int(v: Any, what: str) -> int:
    """v as a C int, or ValueError naming it."""
    i = int(v)
    if not -2**31 <= i < 2**31:
        raise ValueError(f"{what} {i} is out of range")
    return i


def _stream_args(x: Any) -> Tuple[int, str]:
    """The stream and framework arguments of an extension entry for x: x's framework's current
    stream for a CUDA array; none for a host array."""
    return (_cuda.stream_handle(x, None), _cuda.framework_of(x)) if _cuda.is_cuda(x) else (0, "")


def _check_quantizer(q: Any, what: str) -> None:
    if not isinstance(q, Quantizer):
        raise TypeError(f"{what} must be an fp8emu.Quantizer, got {type(q).__name__}")


def _same_side(arr: Any, on_gpu: bool, what: str) -> None:
    """TypeError unless arr (not None) is on x's side: a CUDA array with CUDA x, a host one with host x."""
    if arr is not None and _cuda.is_cuda(arr) != on_gpu:
        raise TypeError(f"{what} must be a {'CUDA' if on_gpu else 'host'} array on x's device, as x "
                        f"(got {type(arr).__name__} {'on the GPU' if _cuda.is_cuda(arr) else 'on the host'})")


@dataclass
class LinearSaved:
    """What :func:`linear_backward` needs from a training :func:`linear_forward`.

    Attributes:
        x_q: the input's quantized tensor (row- and column-wise copies).
        w_q: the weight's quantized tensor (row- and column-wise copies); pass it back as
            ``weight_q=`` to reuse it without a cast (TE's ``is_first_microbatch=False``).
        rows, in_features, out_features: the GEMM sizes.
        accumulation: the model name of the forward's GEMM (dgrad and wgrad use the same model).
    """

    x_q: QuantizedTensor
    w_q: QuantizedTensor
    rows: int
    in_features: int
    out_features: int
    accumulation: str


def quantize_weight(weight: Any, fwd: Quantizer) -> QuantizedTensor:
    """Cast the weight (out_features, in_features) float32 with the ``weight`` role, both copies
    (row-wise for fprop, column-wise for dgrad); records its amax under delayed scaling."""
    return fwd.quantize(_f32_2d(weight, "weight"), "weight", "both")


def linear_forward(
    x: Any,
    weight: Any,
    bias: Any,
    fwd: Quantizer,
    *,
    training: bool = True,
    weight_q: Optional[QuantizedTensor] = None,
    accumulation: Optional[str] = None,
    promotion: int = 0,
) -> Tuple[np.ndarray, Optional[LinearSaved]]:
    """fprop of an FP8 Linear: ``y = x W^T + b`` (TE ``_Linear.forward``; C++ ``nn::Linear::forward``).

    Args:
        x: float32 (rows, in_features).
        weight: float32 (out_features, in_features) master weight; ignored when ``weight_q`` is given.
        bias: float32 (out_features,), or None.
        fwd: the forward :class:`fp8emu.Quantizer` of the layer (its state is updated: delayed
            scaling records the amax of x and W in the ``input`` and ``weight`` history slots).
        training: keep the column-wise copy of x and return :class:`LinearSaved` for the backward.
        weight_q: a cached quantized weight (:attr:`LinearSaved.w_q` or :func:`quantize_weight`):
            used as it is, no cast, no weight amax recorded.
        accumulation: the GEMM model; default "hopper" for per-tensor recipes, "fp32" for block ones.
        promotion: fprop's promotion interval (default 0: fast accumulation, TE's fprop).
    Returns:
        ``(y, saved)``: y float32 (rows, out_features); saved a :class:`LinearSaved` (None when not
        training).
    Raises:
        TypeError: arrays that are not float32. ValueError: shapes that do not match, a model the
        recipe does not take.
    """
    # Every check before the first cast records an amax: here the sides and types, in the extension
    # the shapes, the accumulation and the operands' modes and formats (nn::check_fp8_linear_fprop).
    _check_quantizer(fwd, "fwd")
    x = _f32_2d(x, "x")
    on_gpu = _cuda.is_cuda(x)
    _same_side(bias, on_gpu, "bias")
    if weight_q is not None:
        if not isinstance(weight_q, QuantizedTensor):
            raise TypeError(f"weight_q must be a QuantizedTensor (LinearSaved.w_q or quantize_weight), got "
                            f"{type(weight_q).__name__}")
        if weight_q.is_cuda != on_gpu:
            raise TypeError(f"x is {'a CUDA' if on_gpu else 'a host'} array but weight_q is "
                            f"{'on the GPU' if weight_q.is_cuda else 'on the host'}: pass both on one side")
        w_arr = None
    else:
        if _cuda.is_cuda(weight) != on_gpu:
            raise TypeError(f"x is {'a CUDA' if on_gpu else 'a host'} array but weight is "
                            f"{'on the GPU' if _cuda.is_cuda(weight) else 'on the host'}: pass both on one side")
        w_arr = _f32_2d(weight, "weight")
    if bias is not None and not on_gpu:
        bias = _f32_2d(bias, "bias", 1)
    acc = _accumulation(fwd, accumulation)
    # The C++ step on x's device (the weight's cast when no weight_q is given, then
    # nn::fp8_linear_fprop, the program nn::Linear runs: the input cast, fprop GEMM and bias add).
    stream, framework = _stream_args(x)
    y, x_impl, x_stats, w_new = _fp8emu.linear_fprop(x, w_arr, None if weight_q is None else weight_q._impl, bias,
                                                     fwd._impl, bool(training), acc, _int(promotion, "promotion"),
                                                     stream, framework)
    x_q = QuantizedTensor(x_impl, x_stats)
    w_q = weight_q if w_new is None else QuantizedTensor(*w_new)
    saved = LinearSaved(x_q, w_q, int(x.shape[0]), w_q.cols, w_q.rows, acc) if training else None
    return y, saved


def bias_grad(dy: Any) -> np.ndarray:
    """``db[j] = sum_i dy[i, j]`` in float32, in row order starting from +0 (as nn::Linear::backward).

    dy: float32 (rows, out_features). Returns float32 (out_features,).
    """
    dy = _f32_2d(dy, "dy")
    if _cuda.is_cuda(dy):  # Device::column_sum on dy's device: the same order, the same bits
        return _fp8emu.column_sum(dy, _cuda.stream_handle(dy, None), _cuda.framework_of(dy))
    return _fp8emu.column_sum(dy)


def linear_backward(
    dy: Any,
    saved: LinearSaved,
    bwd: Quantizer,
    *,
    need_dgrad: bool = True,
    need_wgrad: bool = True,
    promotion: int = 128,
) -> Tuple[Optional[np.ndarray], Optional[np.ndarray], np.ndarray]:
    """dgrad, wgrad and bias grad of an FP8 Linear (TE ``_Linear.backward``; C++ ``nn::Linear::backward``).

    Args:
        dy: float32 (rows, out_features), the gradient of y.
        saved: the :class:`LinearSaved` of the training forward.
        bwd: the backward :class:`fp8emu.Quantizer` of the layer (delayed scaling records dy's amax
            in the ``grad_output`` slot).
        need_dgrad, need_wgrad: skip a GEMM whose result is not wanted (the other results keep their bits).
        promotion: dgrad's and wgrad's promotion interval (default 128, TE's split accumulator);
            ignored by block recipes (fp32 per block).
    Returns:
        ``(dx, dW, db)``: float32 (rows, in_features), (out_features, in_features), (out_features,);
        dx / dW are None when not wanted.
    Raises:
        TypeError: dy not float32. ValueError: dy's shape differs from the forward output.
    """
    _check_quantizer(bwd, "bwd")
    if not isinstance(saved, LinearSaved):
        raise TypeError(f"saved must be the LinearSaved of a training linear_forward, got {type(saved).__name__} "
                        f"(a forward with training=False saves nothing)")
    dy = _f32_2d(dy, "dy")
    if tuple(dy.shape) != (saved.rows, saved.out_features):
        raise ValueError(f"dy has shape {dy.shape}; the forward output was ({saved.rows}, {saved.out_features})")
    prom = promotion if saved.accumulation not in ("fp32", "exact") else 0
    # The C++ step (nn::fp8_linear_backward) on dy's device: bias grad, grad_output cast, wgrad, dgrad.
    dx, dw, db, _ = _fp8emu.linear_backward(dy, saved.x_q._impl, saved.w_q._impl, bwd._impl, bool(need_dgrad),
                                            bool(need_wgrad), saved.accumulation, _int(prom, "promotion"),
                                            *_stream_args(dy))
    return dx, dw, db


def round_to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to nearest even bfloat16 and widened back (float32, same shape)."""
    import ml_dtypes

    return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


@dataclass
class _SavedNorm:
    """The norm's saved state (the forward's gamma, x-hat and rsigma, on the input's device), with
    nn::Norm's backward (Device::norm_backward, in C++)."""

    normalization: str
    zero_centered_gamma: bool
    gamma: Any
    xhat: Any
    rsigma: Any

    def backward(self, dln: Any, grad_ln_out: Any = None) -> Tuple[Any, Any, Any]:
        """dx, dgamma, dbeta from the Linear's dgrad dln plus grad_ln_out (one fp32 add;
        layernorm_linear_backward has checked grad_ln_out's side)."""
        return _fp8emu.norm_backward(dln, grad_ln_out, self.xhat, self.rsigma, self.gamma, self.normalization,
                                     self.zero_centered_gamma, *_stream_args(dln))


@dataclass
class LayerNormSaved:
    """What :func:`layernorm_linear_backward` needs: the norm (with its saved x-hat and rsigma) and
    the Linear's :class:`LinearSaved`; ``ln_out`` is the norm output the Linear read (float32)."""

    norm: Any
    linear: LinearSaved
    ln_out: np.ndarray


def layernorm_linear_forward(
    x: Any,
    ln_weight: Any,
    ln_bias: Any,
    weight: Any,
    bias: Any,
    fwd: Quantizer,
    *,
    normalization: str = "LayerNorm",
    eps: float = 1e-5,
    zero_centered_gamma: bool = False,
    training: bool = True,
    weight_q: Optional[QuantizedTensor] = None,
    promotion: int = 0,
) -> Tuple[np.ndarray, Optional[LayerNormSaved], np.ndarray]:
    """``y = Linear(Norm(x))`` with an FP8 Linear (TE ``LayerNormLinear``; C++ ``nn::LayerNormLinear``).

    The norm is fp8emu's C++ LayerNorm/RMSNorm (``include/fp8emu/nn/norm.hpp``: statistics summed in
    double, rounded once to fp32); its fp32 output is cast to FP8 directly (delayed scaling: TE's
    fused norm + cast) or from its bfloat16 rounding (current scaling: TE's norm writes bf16 first).

    Args:
        x: float32 (rows, in_features). ln_weight: float32 (in_features,) gamma. ln_bias: float32
            (in_features,) beta (LayerNorm) or None (RMSNorm). weight, bias, fwd, training,
            weight_q, promotion: as :func:`linear_forward`.
        normalization: "LayerNorm" or "RMSNorm". eps: added to the variance.
        zero_centered_gamma: scale by (1 + gamma).
    Returns:
        ``(y, saved, ln_out)``: y float32 (rows, out_features), saved (None when not training), and
        the norm output (rows, in_features) the Linear read.
    Raises:
        TypeError, ValueError: as :func:`linear_forward`; an unknown normalization.
    """
    _check_quantizer(fwd, "fwd")
    x = _f32_2d(x, "x")
    on_gpu = _cuda.is_cuda(x)
    for arr, what in ((ln_weight, "ln_weight"), (ln_bias, "ln_bias"), (weight, "weight"), (bias, "bias")):
        _same_side(arr, on_gpu, what)
    if not on_gpu:
        ln_weight = _f32_2d(ln_weight, "ln_weight", 1)
        ln_bias = None if ln_bias is None else _f32_2d(ln_bias, "ln_bias", 1)
    # The norm in C++ on x's device (Device::norm_forward: nn::Norm's arithmetic), its output rounded
    # to bf16 there when the quantizer reads the bf16 copy.
    ln, xhat, rsigma, gamma = _fp8emu.norm_forward(x, ln_weight, ln_bias, normalization, float(eps),
                                                   bool(zero_centered_gamma), bool(fwd.reads_bf16_norm_output),
                                                   *_stream_args(x))
    norm = _SavedNorm(normalization, bool(zero_centered_gamma), gamma, xhat, rsigma)
    y, lin = linear_forward(ln, weight, bias, fwd, training=training, weight_q=weight_q, promotion=promotion)
    return y, (LayerNormSaved(norm, lin, ln) if training else None), ln


def layernorm_linear_backward(
    dy: Any,
    saved: LayerNormSaved,
    bwd: Quantizer,
    *,
    grad_ln_out: Any = None,
    need_wgrad: bool = True,
    promotion: int = 128,
) -> Tuple[np.ndarray, np.ndarray, np.ndarray, Optional[np.ndarray], np.ndarray]:
    """Backward of :func:`layernorm_linear_forward`.

    Args:
        dy: float32 (rows, out_features). saved: its :class:`LayerNormSaved`. bwd: the backward quantizer.
        grad_ln_out: optional float32 (rows, in_features) gradient of the returned norm output (TE's
            ``return_layernorm_output``), added in fp32 to the Linear's dgrad before the norm's backward.
        need_wgrad, promotion: as :func:`linear_backward`.
    Returns:
        ``(dx, d_ln_weight, d_ln_bias, dW, db)``: float32 (rows, in), (in,), (in,) (zeros for
        RMSNorm), (out, in) or None, (out,).
    """
    _check_quantizer(bwd, "bwd")
    if not isinstance(saved, LayerNormSaved):
        raise TypeError(f"saved must be the LayerNormSaved of a training layernorm_linear_forward, got "
                        f"{type(saved).__name__}")
    if grad_ln_out is not None:  # checked before the cast records dy's amax
        if not _cuda.is_cuda(grad_ln_out):
            grad_ln_out = np.asarray(grad_ln_out)
        if _cuda.is_cuda(grad_ln_out) != _cuda.is_cuda(dy):
            raise TypeError(f"grad_ln_out must be a {'CUDA' if _cuda.is_cuda(dy) else 'host'} array on dy's device "
                            f"(got {type(grad_ln_out).__name__})")
        want = (saved.linear.rows, saved.linear.in_features)
        if tuple(grad_ln_out.shape) != want:
            raise ValueError(f"grad_ln_out has shape {tuple(grad_ln_out.shape)}; expected {want} (the norm "
                             f"output's)")
        if not _cuda.is_cuda(grad_ln_out):
            grad_ln_out = _f32_2d(grad_ln_out, "grad_ln_out")
    dln, dw, db = linear_backward(dy, saved.linear, bwd, need_dgrad=True, need_wgrad=need_wgrad, promotion=promotion)
    dx, dgamma, dbeta = saved.norm.backward(dln, grad_ln_out)
    return dx, dgamma, dbeta, dw, db
