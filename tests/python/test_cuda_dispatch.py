"""The GPU path's dispatch and errors, checked without a GPU (every CI run).

A CUDA array is simulated by an object whose ``__dlpack_device__()`` is ``(2, 0)`` and whose
``__dlpack__()`` returns a DLPack capsule built here with ctypes (a CUDA device, a dtype, a shape and a
data pointer that is never dereferenced): the extension sees exactly what it sees for a PyTorch
CUDA tensor. On a build without CUDA every GPU entry point must raise TypeError naming the function
and the device; on a build with CUDA but no usable GPU, TypeError naming the function, the device and
why the GPU cannot run. Arguments the GPU path never takes raise ValueError before any device work.
These tests are skipped where a usable GPU exists (the fake pointer would be used there; the real
path is tests/python/test_gpu.py).
"""

import ctypes

import numpy as np
import pytest

import fp8emu
from fp8emu import _cuda, _fp8emu

pytestmark = pytest.mark.skipif(fp8emu.cuda_available(),
                                reason="a usable GPU is here: the fake CUDA arrays would reach the kernels "
                                       "(tests/python/test_gpu.py covers the real path)")


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _Deleter)]


_PyCapsule_New = ctypes.pythonapi.PyCapsule_New
_PyCapsule_New.restype = ctypes.py_object
_PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

# DLPack type codes: 0 int, 1 uint, 2 float, 4 bfloat.
_DTYPES = {"float32": (2, 32), "float16": (2, 16), "uint8": (1, 8), "float64": (2, 64)}


class FakeCudaArray:
    """A C-contiguous array on CUDA device `device_id` as DLPack describes it (no memory behind it)."""

    def __init__(self, shape, dtype="float32", device_id=0, device_type=2):
        self.shape = tuple(shape)
        self.device_id = device_id
        self.device_type = device_type
        code, bits = _DTYPES[dtype]
        self._shape = (ctypes.c_int64 * max(1, len(shape)))(*shape)
        self._deleter = _Deleter(lambda p: None)
        self._mt = _DLManagedTensor()
        t = self._mt.dl_tensor
        t.data = 0x100000  # never read: every path under test raises first
        t.device = _DLDevice(device_type, device_id)
        t.ndim = len(shape)
        t.dtype = _DLDataType(code, bits, 1)
        t.shape = self._shape
        t.strides = None
        t.byte_offset = 0
        self._mt.deleter = self._deleter

    def __dlpack_device__(self):
        return (self.device_type, self.device_id)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        if max_version is not None:
            raise TypeError("this producer predates max_version")  # nanobind then asks for the unversioned capsule
        return _PyCapsule_New(ctypes.addressof(self._mt), b"dltensor", None)


def _device_error(fn):
    """The TypeError a GPU entry point raises here: built without CUDA, or no usable GPU."""
    if _fp8emu.cuda:
        return rf"{fn}: .* is a CUDA array, but this machine cannot run fp8emu's GPU kernels"
    return rf"{fn}: .* is a CUDA array \(DLPack device type 2\); this build of fp8emu runs on the CPU only"


def test_cuda_available_is_false_without_a_gpu():
    assert fp8emu.cuda_available() is False
    assert isinstance(_fp8emu.cuda, bool)
    assert _fp8emu.cuda_why_not()  # says why


def test_fake_array_is_seen_as_cuda():
    x = FakeCudaArray((4, 8))
    assert _cuda.is_cuda(x) and _cuda.device_of(x) == (2, 0)
    assert not _cuda.is_cuda(np.zeros(3, np.float32))
    assert _cuda.framework_of(x) == "" and _cuda.stream_handle(x, None) == 0
    assert _cuda.stream_handle(x, 1234) == 1234
    with pytest.raises(TypeError, match="stream must be"):
        _cuda.stream_handle(x, "default")
    # The extension sees the device the capsule names (no copy, nothing read).
    assert _fp8emu.data_pointer(x) == 0x100000


def test_cast_of_a_cuda_array_names_the_function_and_device():
    with pytest.raises(TypeError, match=_device_error("fp8emu.cast")):
        fp8emu.cast(FakeCudaArray((3, 5)), "e4m3fn")
    with pytest.raises(TypeError, match=_device_error("fp8emu.cast")):
        fp8emu.cast(FakeCudaArray((7,), device_id=1), "e5m2", scale=2.0)


def test_decode_of_cuda_codes_names_the_function_and_device():
    with pytest.raises(TypeError, match=_device_error("fp8emu.decode")):
        fp8emu.decode(FakeCudaArray((16,), "uint8"), "e4m3fn")


def test_gemm_of_cuda_operands_names_the_function_and_device():
    a, b = FakeCudaArray((4, 32), "uint8"), FakeCudaArray((8, 32), "uint8")
    with pytest.raises(TypeError, match=_device_error("fp8emu.gemm")):
        fp8emu.gemm(a, b, format_a="e4m3fn", format_b="e4m3fn")
    # One CUDA operand is enough to take the GPU path.
    with pytest.raises(TypeError, match=_device_error("fp8emu.gemm")):
        fp8emu.gemm(np.zeros((4, 32), np.uint8), b, format_a="e4m3fn", format_b="e4m3fn")


def test_the_gemm_epilogue_takes_the_gpu_path_and_checks_its_arrays():
    # alpha, beta * c, bias and every output type go to the GPU path (which says why it cannot run
    # here); a host c or bias next to CUDA operands is a TypeError naming it; an unknown out_dtype is
    # a ValueError before any device work.
    a, b = FakeCudaArray((4, 32), "uint8"), FakeCudaArray((8, 32), "uint8")
    for kw in [{"out_dtype": "bfloat16"}, {"out_dtype": "float16"}, {"out_dtype": "e5m2", "d_scale": 2.0},
               {"alpha": 2.0}, {"bias": FakeCudaArray((8,))}, {"beta": 1.0, "c": FakeCudaArray((4, 8))}]:
        with pytest.raises(TypeError, match=_device_error("fp8emu.gemm")):
            fp8emu.gemm(a, b, format_a="e4m3fn", format_b="e4m3fn", **kw)
    with pytest.raises(TypeError, match=r"fp8emu.gemm: bias must be a CUDA array on the operands' device"):
        fp8emu.gemm(a, b, format_a="e4m3fn", format_b="e4m3fn", bias=np.zeros(8, np.float32))
    with pytest.raises(TypeError, match=r"fp8emu.gemm: c must be a CUDA array on the operands' device"):
        fp8emu.gemm(a, b, format_a="e4m3fn", format_b="e4m3fn", beta=1.0, c=np.zeros((4, 8), np.float32))
    with pytest.raises(ValueError, match=r"unknown out_dtype 'int8'"):
        fp8emu.gemm(a, b, format_a="e4m3fn", format_b="e4m3fn", out_dtype="int8")
    with pytest.raises(ValueError, match=r"fp8emu.cast: stochastic rounding .* on a CUDA array"):
        fp8emu.cast(FakeCudaArray((4,)), "e4m3fn", rounding="stochastic", seed=1)


def test_host_only_functions_reject_cuda_arrays_naming_the_device():
    x = FakeCudaArray((16, 8), "uint8")
    if _fp8emu.cuda:
        msg = r"a is a CUDA array \(DLPack device type 2\); this function runs on the CPU only"
    else:
        msg = r"a is a CUDA array \(DLPack device type 2\); this build of fp8emu runs on the CPU only \(built without CUDA\)"
    with pytest.raises(TypeError, match=msg):
        fp8emu.mma(x, FakeCudaArray((8, 8), "uint8"), format_a="e4m3fn", format_b="e4m3fn")
    with pytest.raises(TypeError, match=r"x is a CUDA array"):
        fp8emu.compare(FakeCudaArray((4,)), np.zeros(4, np.float32))


def test_quantizers_send_cuda_arrays_to_the_gpu_path():
    # Every recipe's Quantizer.quantize takes CUDA arrays to its GPU path, which says why it cannot
    # run here; the quantizer's state is untouched.
    for recipe in (fp8emu.DelayedScaling(amax_history_len=4), fp8emu.Float8CurrentScaling(),
                   fp8emu.MXFP8BlockScaling(), fp8emu.Float8BlockScaling()):
        q = fp8emu.Quantizer(recipe, "forward")
        before = q.amax_history("input")
        with pytest.raises(TypeError, match=_device_error(r"fp8emu.Quantizer.quantize")):
            q.quantize(FakeCudaArray((4, 8)), "input", "both")
        after = q.amax_history("input")
        assert (before is None and after is None) or np.array_equal(before, after)
    q = fp8emu.Quantizer(fp8emu.DelayedScaling(), "forward")
    with pytest.raises(ValueError, match="stream applies to CUDA arrays only"):
        q.quantize(np.ones((2, 4), np.float32), "input", stream=0)
    # A role the quantizer's direction does not have is a ValueError before any device work.
    with pytest.raises(ValueError, match="the forward quantizer casts only input and weight"):
        q.quantize(FakeCudaArray((4, 8)), "grad_output")


def test_other_devices_keep_the_cpu_error():
    # ROCm (DLPack 10) is not CUDA: the host path's TypeError, naming the device.
    with pytest.raises(TypeError, match=r"x is a ROCm array \(DLPack device type 10\)"):
        fp8emu.cast(FakeCudaArray((4,), device_type=10), "e4m3fn")


def test_stream_is_for_cuda_arrays_only():
    x = np.ones(4, np.float32)
    with pytest.raises(ValueError, match="stream applies to CUDA arrays only"):
        fp8emu.cast(x, "e4m3fn", stream=0)
    with pytest.raises(ValueError, match="stream applies to CUDA arrays only"):
        fp8emu.decode(fp8emu.cast(x, "e4m3fn"), stream=0)
    q = fp8emu.cast(np.ones((2, 32), np.float32), "e4m3fn")
    with pytest.raises(ValueError, match="stream applies to CUDA arrays only"):
        fp8emu.gemm(q, q, stream=0)


def test_recipe_gemm_checks_its_operands_devices():
    # The GPU GEMM of quantized operands says why it cannot run here; host operands keep the emulator;
    # anything but a QuantizedTensor is a TypeError naming it.
    with pytest.raises(TypeError, match=_device_error(r"fp8emu.recipe.gemm")):
        _fp8emu.gemm_tn(None, "rowwise", None, "rowwise", "fp32", 0)
    with pytest.raises(ValueError, match="one copy of each operand"):
        _fp8emu.gemm_tn(None, "both", None, "rowwise", "fp32", 0)
    q = fp8emu.Quantizer(fp8emu.Float8CurrentScaling(), "forward")
    a = q.quantize(np.ones((4, 32), np.float32), "input")
    assert not a.is_cuda and a.device == "cpu" and "device='cpu'" in repr(a)
    assert fp8emu.recipe.gemm(a, a).shape == (4, 4)
    with pytest.raises(TypeError, match="b must be a QuantizedTensor"):
        fp8emu.recipe.gemm(a, np.ones((4, 32), np.float32))


def test_layers_send_cuda_arrays_to_the_gpu_path():
    # fp8emu.layers' Linear on CUDA arrays casts on the GPU (which says why it cannot run here), and
    # its bias add and bias grad are the GPU twins' entry points, with the same errors.
    from fp8emu import layers

    fwd = fp8emu.Quantizer(fp8emu.Float8CurrentScaling(), "forward")
    with pytest.raises(TypeError, match=_device_error(r"fp8emu.layers.linear_forward")):
        layers.linear_forward(FakeCudaArray((4, 32)), FakeCudaArray((8, 32)), None, fwd)
    with pytest.raises(TypeError, match=_device_error(r"fp8emu.layers.bias_grad")):
        layers.bias_grad(FakeCudaArray((4, 8)))
    # The Linear step's one entry each sends CUDA arrays to the GPU half.
    with pytest.raises(TypeError, match=_device_error(r"fp8emu.layers.linear_forward")):
        _fp8emu.linear_fprop(FakeCudaArray((4, 32)), None, None, None, fwd._impl, True, "fp32", 0, 0, "")
    bwd = fp8emu.Quantizer(fp8emu.Float8CurrentScaling(), "backward")
    with pytest.raises(TypeError, match=_device_error(r"fp8emu.layers.linear_backward")):
        _fp8emu.linear_backward(FakeCudaArray((4, 8)), None, None, bwd._impl, True, True, "fp32", 0, 0, "")
    with pytest.raises(TypeError, match=_device_error(r"fp8emu.layers.layernorm_linear_forward")):
        layers.layernorm_linear_forward(FakeCudaArray((4, 32)), FakeCudaArray((32,)), FakeCudaArray((32,)),
                                        FakeCudaArray((8, 32)), None, fwd)
    with pytest.raises(TypeError, match=_device_error(r"fp8emu.layers.layernorm_linear_backward")):
        _fp8emu.norm_backward(FakeCudaArray((4, 32)), None, FakeCudaArray((4, 32)), FakeCudaArray((4,)),
                              FakeCudaArray((32,)), "LayerNorm", False, 0, "")
    with pytest.raises(ValueError, match=r"unknown normalization 'BatchNorm'"):
        _fp8emu.norm_forward(FakeCudaArray((4, 32)), FakeCudaArray((32,)), None, "BatchNorm", 1e-5, False,
                             False, 0, "")
    assert _fp8emu.cuda_device_index() == -1
    # x and the weight on different sides: a TypeError before any cast (the quantizer's state untouched).
    dq = fp8emu.Quantizer(fp8emu.DelayedScaling(amax_history_len=4), "forward")
    with pytest.raises(TypeError, match="x is a host array but weight is on the GPU"):
        layers.linear_forward(np.ones((4, 32), np.float32), FakeCudaArray((8, 32)), None, dq)
    with pytest.raises(TypeError, match="x is a CUDA array but weight is on the host"):
        layers.linear_forward(FakeCudaArray((4, 32)), np.ones((8, 32), np.float32), None, dq)
    with pytest.raises(TypeError, match="x is a CUDA array but weight_q is on the host"):
        layers.linear_forward(FakeCudaArray((4, 32)), None, None, dq,
                              weight_q=layers.quantize_weight(np.ones((8, 32), np.float32), fwd))
    assert not dq.amax_history("input").any() and not dq.amax_history("weight").any()


def test_the_extension_entry_points_exist_in_every_build():
    for name in ("cuda_available", "cuda_why_not", "cast", "cuda_cast_transpose", "cuda_amax", "decode",
                 "gemm", "gemm_tn", "CudaQuantizedTensor", "column_sum", "linear_fprop", "linear_backward",
                 "cuda_device_index", "norm_forward", "norm_backward"):
        assert hasattr(_fp8emu, name), name
    with pytest.raises(TypeError, match=_device_error(r"fp8emu.Quantizer.quantize")):
        _fp8emu.cuda_cast_transpose(FakeCudaArray((4, 8)), "e4m3fn", 1.0, True, True, 0, "")
