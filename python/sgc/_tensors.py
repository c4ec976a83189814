"""Tensors as DLTensor structs for the C ABI, read where they lie (no copies), and the session's own
tensors handed out as DLPack capsules."""
import contextlib
import ctypes

from . import _abi

# (DLPack code, bits) <-> numpy's dtype names; bool travels as uint8 (the ABI's way).
_NAMES = {(_abi.KDL_FLOAT, 32): "float32", (_abi.KDL_FLOAT, 64): "float64", (_abi.KDL_FLOAT, 16): "float16",
          (_abi.KDL_BFLOAT, 16): "bfloat16", (_abi.KDL_INT, 64): "int64", (_abi.KDL_INT, 32): "int32", (_abi.KDL_INT, 16): "int16",
          (_abi.KDL_INT, 8): "int8", (_abi.KDL_UINT, 8): "uint8", (_abi.KDL_UINT, 16): "uint16", (_abi.KDL_UINT, 32): "uint32",
          (_abi.KDL_UINT, 64): "uint64"}
_KINDS = {"f": _abi.KDL_FLOAT, "i": _abi.KDL_INT, "u": _abi.KDL_UINT, "b": _abi.KDL_UINT}

_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype, _get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]


def describe(dtype):
    """A DLDataType's name, as numpy writes it ("float32", "int64", "bfloat16", ...)."""
    return _NAMES.get((dtype.code, dtype.bits), f"dlpack({dtype.code}, {dtype.bits})")


def _from_array_interface(value, name):
    ai = value.__array_interface__
    shape = tuple(ai["shape"])
    typestr = ai["typestr"]
    if typestr[0] not in "<|" or typestr[1] not in _KINDS:
        raise TypeError(f"input '{name}': dtype {typestr} is not one sgc takes (little-endian numbers or bool)")
    itemsize = int(typestr[2:])
    if ai.get("strides") is not None:  # None means C-contiguous
        expect, ok = itemsize, True
        for dim, stride in zip(reversed(shape), reversed(ai["strides"])):
            ok = ok and (dim == 1 or stride == expect)
            expect *= dim
        if not ok:
            raise TypeError(f"input '{name}': not contiguous (numpy.ascontiguousarray makes it so)")
    return ai["data"][0], shape, _abi.DLDataType(_KINDS[typestr[1]], itemsize * 8, 1)


@contextlib.contextmanager
def dl_tensor(value, name, stream=None):
    """A DLTensor describing `value` in place: a numpy array (or anything with
    __array_interface__), else anything with __dlpack__ (a torch tensor on the CPU or a GPU, say),
    kept alive while the struct is in use; `stream` (a CUDA stream handle) is the one that will read
    it, as the DLPack protocol asks the producer. The ABI checks device, dtype, shape and layout
    against what it expects."""
    if hasattr(value, "__array_interface__"):
        data, shape, dtype = _from_array_interface(value, name)
        dims = (ctypes.c_int64 * len(shape))(*shape)
        yield _abi.DLTensor(data, _abi.DLDevice(_abi.KDL_CPU, 0), len(shape), dtype, dims, None, 0)
        del value, dims
        return
    if hasattr(value, "__dlpack__"):
        on_gpu = hasattr(value, "__dlpack_device__") and value.__dlpack_device__()[0] != _abi.KDL_CPU
        capsule = value.__dlpack__(stream=stream) if on_gpu and stream is not None else value.__dlpack__()
        managed = _abi.DLManagedTensor.from_address(_get_pointer(capsule, b"dltensor"))
        yield managed.dl_tensor  # the capsule, unconsumed, frees the tensor when it goes
        del managed, capsule
        return
    raise TypeError(f"input '{name}': a {type(value).__name__} is neither an array (numpy) nor a DLPack tensor (torch)")


_new_capsule = ctypes.pythonapi.PyCapsule_New
_new_capsule.restype, _new_capsule.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
# The same C API on a raw PyObject* (a capsule's destructor gets the dying object: no new reference).
_raw_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", ctypes.pythonapi))
_raw_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer", ctypes.pythonapi))
_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_abi.DLManagedTensor))
_lent = {}  # address of a DLManagedTensor handed out -> what it keeps alive, until its deleter runs


@_DELETER
def _release(managed):
    _lent.pop(ctypes.addressof(managed.contents), None)


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_gone(cap):
    """A capsule nobody consumed (still "dltensor") lets its tensor go itself, as DLPack asks."""
    if _raw_valid(cap, b"dltensor"):
        _lent.pop(_raw_pointer(cap, b"dltensor"), None)


def capsule(tensor, keep):
    """A DLPack capsule ("dltensor") over `tensor` (a DLTensor the ABI filled, its shape array owned
    by the session), which keeps `keep` (the session) alive until the consumer (torch.from_dlpack)
    lets it go."""
    managed = _abi.DLManagedTensor(tensor, None, ctypes.cast(_release, ctypes.c_void_p))
    _lent[ctypes.addressof(managed)] = (managed, keep)
    return _new_capsule(ctypes.addressof(managed), b"dltensor", ctypes.cast(_capsule_gone, ctypes.c_void_p))
