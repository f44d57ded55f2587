"""Arrays in and out: zero copies (NumPy, JAX), out= written in place, devices, the GIL."""

import ctypes
import threading
import time

import ml_dtypes
import numpy as np
import pytest

import fp8emu
from fp8emu import _fp8emu


def test_input_is_read_in_place():
    x = np.linspace(-500, 500, 1001, dtype=np.float32)
    assert _fp8emu.data_pointer(x) == x.ctypes.data
    v = x[10:]  # a contiguous view at an offset: still no copy
    assert _fp8emu.data_pointer(v) == v.ctypes.data


def test_out_is_written_in_place():
    x = np.linspace(-500, 500, 1001, dtype=np.float32).reshape(7, 143)
    for out in (np.zeros((7, 143), np.uint8), np.zeros((7, 143), ml_dtypes.float8_e4m3fn)):
        ptr = out.ctypes.data
        r = fp8emu.cast(x, "e4m3fn", out=out)
        assert r is out and out.ctypes.data == ptr
        assert np.array_equal(out.view(np.uint8), fp8emu.cast(x, "e4m3fn").view(np.uint8))
    y = np.zeros((7, 143), np.float32)
    assert fp8emu.decode(fp8emu.cast(x, "e5m2"), out=y) is y
    assert np.array_equal(y, fp8emu.cast(x, "e5m2").astype(np.float32))


def test_results_are_numpy_arrays_with_ml_dtypes():
    x = np.float32([[1.0, -2.5], [6.0, 0.0]])
    for name, t in [("e4m3fn", ml_dtypes.float8_e4m3fn), ("e5m2", ml_dtypes.float8_e5m2),
                    ("e8m0fnu", ml_dtypes.float8_e8m0fnu), ("e2m1fn", ml_dtypes.float4_e2m1fn),
                    ("e2m3fn", ml_dtypes.float6_e2m3fn), ("e3m2fn", ml_dtypes.float6_e3m2fn),
                    ("e4m3fnuz", ml_dtypes.float8_e4m3fnuz), ("e5m2fnuz", ml_dtypes.float8_e5m2fnuz)]:
        r = fp8emu.cast(np.abs(x) if name == "e8m0fnu" else x, name)
        assert isinstance(r, np.ndarray) and r.dtype == np.dtype(t) and r.shape == (2, 2)
    assert fp8emu.cast(1.5, "e4m3fn").shape == ()  # scalars: 0-d arrays
    assert fp8emu.cast([1.0, 2.0], "e4m3fn").astype(np.float32).tolist() == [1.0, 2.0]


class FakeCudaArray:
    """A float32 array that says it lives on a CUDA device (DLPack device type 2), through a
    hand-built DLPack capsule: what a CuPy or PyTorch CUDA tensor hands over."""

    class DLTensor(ctypes.Structure):
        _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                    ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                    ("lanes", ctypes.c_uint16), ("shape", ctypes.POINTER(ctypes.c_int64)),
                    ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]

    class Managed(ctypes.Structure):
        pass

    Managed._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]

    def __init__(self):
        self.host = np.zeros(4, np.float32)  # never read: the device check comes first
        self.shape_buf = (ctypes.c_int64 * 1)(4)
        self.shape = (4,)
        self.dtype = np.dtype(np.float32)
        self.managed = self.Managed()
        t = self.managed.dl_tensor
        t.data, t.device_type, t.device_id, t.ndim = self.host.ctypes.data, 2, 0, 1
        t.code, t.bits, t.lanes = 2, 32, 1  # kDLFloat, 32 bits
        t.shape = self.shape_buf

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None, **kwargs):
        if kwargs.get("max_version") is not None:
            raise TypeError("unversioned DLPack only")
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new(ctypes.addressof(self.managed), b"dltensor", None)


@pytest.mark.skipif(fp8emu.cuda_available(), reason="a usable GPU is here: CUDA arrays run on it (test_gpu.py)")
def test_device_arrays_are_rejected_by_name():
    if fp8emu._fp8emu.cuda:  # built with CUDA, no usable GPU (test_cuda_dispatch.py has the rest)
        msg = r"fp8emu.cast: x is a CUDA array, but this machine cannot run fp8emu's GPU kernels"
    else:
        msg = r"fp8emu.cast: x is a CUDA array \(DLPack device type 2\); this build of fp8emu runs on the CPU"
    with pytest.raises(TypeError, match=msg):
        fp8emu.cast(FakeCudaArray(), "e4m3fn")


def test_gil_is_released_while_the_kernel_runs():
    # While one thread runs a long GEMM, the main thread keeps executing Python: with the GIL held
    # for the whole call it could not run at all between the call's start and end.
    rng = np.random.default_rng(0)
    a = rng.standard_normal((96, 4096)).astype(ml_dtypes.float8_e4m3fn)
    b = rng.standard_normal((96, 4096)).astype(ml_dtypes.float8_e4m3fn)
    window = {}

    def work():
        window["t0"] = time.perf_counter()
        fp8emu.gemm(a, b, accumulation="exact")
        window["t1"] = time.perf_counter()

    t = threading.Thread(target=work)
    ticks = []
    t.start()
    while t.is_alive():
        ticks.append(time.perf_counter())
        time.sleep(0.001)
    t.join()
    t0, t1 = window["t0"], window["t1"]
    assert t1 - t0 > 0.05, "the GEMM must take long enough to observe"
    inside = [x for x in ticks if t0 + 0.25 * (t1 - t0) < x < t0 + 0.75 * (t1 - t0)]
    assert inside, f"no Python ran during the middle half of a {t1 - t0:.3f} s GEMM"


# ----------------------------------------------------------------------------------------- JAX


def test_jax_arrays_without_copies():
    jax = pytest.importorskip("jax", reason="jax is not installed (FP8EMU_TEST_JAX=0 or no wheel)")
    jnp = jax.numpy
    x = jnp.linspace(-600, 600, 4097, dtype=jnp.float32)
    assert _fp8emu.data_pointer(x) == x.unsafe_buffer_pointer()  # read through DLPack in place
    q = fp8emu.cast(x, "e4m3fn")
    assert np.array_equal(q.view(np.uint8), fp8emu.cast(np.asarray(x), "e4m3fn").view(np.uint8))
    # bfloat16 arrives as DLPack's bfloat type.
    xb = x.astype(jnp.bfloat16)
    assert np.array_equal(fp8emu.cast(xb, "e5m2", policy="ml_dtypes").view(np.uint8),
                          np.asarray(xb).astype(ml_dtypes.float8_e5m2).view(np.uint8))
    # jax's float8 arrays decode with their format inferred.
    j8 = x.astype(jnp.float8_e4m3fn)
    assert np.array_equal(fp8emu.decode(j8), np.asarray(j8).astype(np.float32), equal_nan=True)
    # Round trip: the NumPy result goes back into JAX.
    back = jnp.asarray(q)
    assert back.dtype == jnp.float8_e4m3fn
