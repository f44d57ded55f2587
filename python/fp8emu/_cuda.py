"""The GPU path of :func:`fp8emu.cast`, :func:`fp8emu.decode` and :func:`fp8emu.gemm` for CUDA arrays.

A CUDA DLPack array (PyTorch CUDA tensor, CuPy array, JAX GPU array, or anything whose
``__dlpack_device__()`` is ``(2, id)``) is read in place by the extension (python/src/cuda_*.cpp),
which runs the CUDA twins of the emulator's kernels on it through the library's device API
(include/fp8emu/cuda/device.hpp) and returns a new CUDA array of the same framework. See
docs/python.md §GPU arrays: what runs on the GPU, the bits, streams and errors.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

from . import _fp8emu

KDL_CUDA = 2  #: DLPack's device type of CUDA memory (kDLCUDA)


def available() -> bool:
    """True when this build has CUDA and a GPU of compute capability >= 8.9 can run its kernels."""
    return bool(_fp8emu.cuda_available())


def device_of(x: Any) -> Optional[Tuple[int, int]]:
    """``x.__dlpack_device__()`` as ``(device_type, device_id)``, or None for objects without it."""
    f = getattr(x, "__dlpack_device__", None)
    if f is None:
        return None
    try:
        d = f()
        return int(d[0]), int(d[1])
    except Exception:  # a producer that cannot say: leave the checks to the extension
        return None


def is_cuda(x: Any) -> bool:
    """True for an array in CUDA device memory (DLPack device type 2)."""
    d = device_of(x)
    return d is not None and d[0] == KDL_CUDA


def framework_of(x: Any) -> str:
    """The framework results are returned in: "torch", "cupy", "jax", or "" (nanobind's ndarray,
    readable by any DLPack consumer, e.g. ``torch.from_dlpack``)."""
    mod = type(x).__module__
    if mod.startswith("torch"):
        return "torch"
    if mod.startswith("cupy"):
        return "cupy"
    if mod.startswith("jax"):
        return "jax"
    return ""


def stream_handle(x: Any, stream: Any) -> int:
    """The cudaStream_t the call runs on, as an integer (0: the legacy default stream).

    ``stream`` may be an int handle, a ``torch.cuda.Stream`` (``.cuda_stream``), a CuPy stream
    (``.ptr``) or None: then PyTorch tensors run on ``torch.cuda.current_stream(x.device)``, CuPy
    arrays on CuPy's current stream, and everything else on the legacy default stream.
    """
    if stream is not None:
        for attr in ("cuda_stream", "ptr"):
            if hasattr(stream, attr):
                return int(getattr(stream, attr))
        if isinstance(stream, int):
            return stream
        raise TypeError(f"stream must be an int cudaStream_t, a torch.cuda.Stream or a CuPy stream "
                        f"(got {type(stream).__name__})")
    fw = framework_of(x)
    if fw == "torch":
        import torch  # already imported: x is a tensor

        return int(torch.cuda.current_stream(x.device).cuda_stream)
    if fw == "cupy":
        import cupy  # already imported: x is a CuPy array

        return int(cupy.cuda.get_current_stream().ptr)
    if fw == "jax":
        x.block_until_ready()  # JAX dispatches asynchronously; its buffer must be complete
    return 0


def as_uint8(x: Any) -> Any:
    """A uint8 view of an 8-bit PyTorch tensor (float8 tensors: ``.view(torch.uint8)``, no copy); other
    arrays unchanged."""
    if framework_of(x) == "torch":
        import torch

        return x.view(torch.uint8) if x.dtype != torch.uint8 and x.element_size() == 1 else x
    return x


def codes_as(codes: Any, fmt: str, fw: str) -> Any:
    """uint8 codes as the format's dtype of the framework where it has one (PyTorch, JAX float8)."""
    if fw == "torch":
        import torch

        t = getattr(torch, f"float8_{fmt}", None)
        return codes.view(t) if t is not None else codes
    if fw == "jax":
        import jax.numpy as jnp

        t = getattr(jnp, f"float8_{fmt}", None)
        return codes.view(t) if t is not None else codes
    return codes


def _check_out(out: Any, fn: str) -> Any:
    if out is None:
        return None
    if not is_cuda(out):
        raise TypeError(f"{fn}: out must be a CUDA array on the inputs' device when the inputs are CUDA arrays "
                        f"(got {type(out).__name__} on device {device_of(out)})")
    return as_uint8(out)


def cast(x: Any, fmt: str, scale: float, policy: str, rounding: Optional[str], seed: Optional[int], out: Any,
         stream: Any) -> Any:
    """fp8emu.cast of a CUDA array: float32 to E4M3/E5M2 codes with CUDA's satfinite cast."""
    if seed is not None:
        raise ValueError("fp8emu.cast: stochastic rounding (seed=...) on a CUDA array: the GPU path rounds to nearest "
                         "only; copy x to the host for stochastic rounding")
    fw = framework_of(x)
    s = stream_handle(x, stream)
    codes, _stats = _fp8emu.cast(x, fmt, float(scale), policy, rounding or "", 0, False, _check_out(out, "fp8emu.cast"),
                                 s, fw)
    if out is not None:
        return out
    return codes_as(codes, fmt, fw)


def decode(codes: Any, fmt: str, scale_inv: float, out: Any, stream: Any) -> Any:
    """fp8emu.decode of CUDA codes (E4M3/E5M2) to float32."""
    fw = framework_of(codes)
    s = stream_handle(codes, stream)
    y = _fp8emu.decode(codes, fmt, float(scale_inv), _check_out(out, "fp8emu.decode"), s, fw)
    return out if out is not None else y


def gemm(qa: Any, qb: Any, fa: str, fb: str, *, scale_inv_a: float, scale_inv_b: float, accumulation: str,
         promotion: int, split_k: int, layout: str, out_kind: str, d_scale: float, alpha: float, beta: float, c: Any,
         bias: Any, out: Any, return_amax: bool, stream: Any):
    """fp8emu.gemm of CUDA operands: the twin of emu::gemm_fp8_tn with its epilogue,
    t = RN(acc(A, B) * RN(scale_inv_a * scale_inv_b)), then alpha, beta * c and bias (one fp32
    rounding each), written as out_kind: "float32", "bfloat16", "float16" (round to nearest even) or
    an FP8 format's codes of RN(t * d_scale) (__NV_SATFINITE)."""
    fn = "fp8emu.gemm"
    for name, arr in (("c", c), ("bias", bias)):
        if arr is not None and not is_cuda(arr):
            raise TypeError(f"{fn}: {name} must be a CUDA array on the operands' device when the operands are CUDA "
                            f"arrays (got {type(arr).__name__} on device {device_of(arr)})")
    fw = framework_of(qa) or framework_of(qb)
    s = stream_handle(qa if framework_of(qa) else qb, stream)
    d, amax = _fp8emu.gemm(qa, qb, fa, fb, float(scale_inv_a), float(scale_inv_b), accumulation, int(promotion),
                           int(split_k), layout, out_kind, float(d_scale), float(alpha), float(beta), c, bias,
                           _check_out(out, fn), bool(return_amax), s, fw)
    if out is not None:
        result = out
    elif out_kind in ("float32", "bfloat16", "float16"):
        result = d
    else:
        result = codes_as(d, out_kind, fw)
    return (result, amax) if return_amax else result
