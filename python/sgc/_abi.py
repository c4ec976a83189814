"""The C ABI of a compiled library (runtime/include/sgc/sgc.h) as ctypes declarations."""
import ctypes

ABI_VERSION = 1  # SGC_ABI_VERSION; checked against the library's sgc_abi_version()

KDL_CPU, KDL_CUDA = 1, 2
KDL_INT, KDL_UINT, KDL_FLOAT, KDL_BFLOAT = 0, 1, 2, 4
TENSOR_INPUT, TENSOR_PARAMETER, TENSOR_STATE, TENSOR_OUTPUT = 0, 1, 2, 3

# sgc_status (sgc.h): what each code means
STATUS = {0: "ok", 1: "invalid argument", 2: "not found", 3: "shape mismatch", 4: "dtype mismatch", 5: "device",
          6: "io", 7: "out of memory", 8: "internal", 9: "communication", 10: "out of pages", 11: "non-finite loss"}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class DecodeInfo(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int32) for n in ("block_size", "blocks", "max_seqs", "max_context", "tokens_per_step", "vocab", "layers",
                                             "free_pages", "live_seqs")] + \
               [(n, ctypes.c_uint64) for n in ("pool_bytes", "table_bytes", "free_list_bytes")]


class Sampling(ctypes.Structure):
    _fields_ = [("temperature", ctypes.c_float), ("top_k", ctypes.c_int32), ("top_p", ctypes.c_float), ("seed", ctypes.c_uint64)]


OUT_OF_PAGES = 10


class Options(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("version", ctypes.c_uint32), ("device", ctypes.c_char_p),
                ("num_threads", ctypes.c_int32), ("communicator", ctypes.c_char_p), ("timeout_ms", ctypes.c_int32),
                ("rank", ctypes.c_int32), ("world_size", ctypes.c_int32), ("nccl_id", ctypes.c_uint8 * 128),
                ("cuda_stream", ctypes.c_void_p)]


def declare(lib):
    """Sets the argument and result types of the functions this package calls."""
    P, c = ctypes.POINTER, ctypes
    session = c.c_void_p
    sigs = {
        "sgc_abi_version": (c.c_uint32, []),
        "sgc_last_error": (c.c_char_p, []),
        "sgc_session_create": (c.c_int, [P(Options), P(session)]),
        "sgc_session_destroy": (None, [session]),
        "sgc_model_hash": (c.c_int, [session, P(c.c_char_p)]),
        "sgc_device_description": (c.c_int, [session, P(c.c_char_p)]),
        "sgc_memory_plan_bytes": (c.c_int, [session, P(c.c_uint64)]),
        "sgc_nccl_unique_id": (c.c_int, [P(c.c_uint8)]),
        "sgc_tensor_count": (c.c_int, [session, c.c_int, P(c.c_int32)]),
        "sgc_tensor_info": (c.c_int, [session, c.c_int, c.c_int32, P(c.c_char_p), P(DLDataType), P(c.c_int32), P(P(c.c_int64))]),
        "sgc_set_input": (c.c_int, [session, c.c_char_p, P(DLTensor)]),
        "sgc_set_learning_rate": (c.c_int, [session, c.c_double]),
        "sgc_train_step": (c.c_int, [session, P(c.c_double)]),
        "sgc_eval_step": (c.c_int, [session, P(c.c_double)]),
        "sgc_trace_next_step": (c.c_int, [session, c.c_char_p]),
        "sgc_decode_info_get": (c.c_int, [session, P(DecodeInfo)]),
        "sgc_seq_add": (c.c_int, [session, P(c.c_int64), c.c_int32, P(c.c_int32), P(c.c_float)]),
        "sgc_seq_fork": (c.c_int, [session, c.c_int32, P(c.c_int32)]),
        "sgc_seq_free": (c.c_int, [session, c.c_int32]),
        "sgc_seq_length": (c.c_int, [session, c.c_int32, P(c.c_int32)]),
        "sgc_decode_step": (c.c_int, [session, c.c_int32, P(c.c_int32), P(c.c_int64), P(c.c_float)]),
        "sgc_seq_add_greedy": (c.c_int, [session, P(c.c_int64), c.c_int32, P(c.c_int32), P(c.c_int64), P(c.c_float)]),
        "sgc_decode_step_greedy": (c.c_int, [session, c.c_int32, P(c.c_int32), P(c.c_int64), P(c.c_int64), P(c.c_float)]),
        "sgc_seq_add_sample": (c.c_int, [session, P(c.c_int64), c.c_int32, P(Sampling), P(c.c_int32), P(c.c_int64), P(c.c_float)]),
        "sgc_decode_step_sample": (c.c_int, [session, c.c_int32, P(c.c_int32), P(c.c_int64), P(Sampling), P(c.c_int64), P(c.c_float)]),
        "sgc_seqs_add": (c.c_int, [session, c.c_int32, P(c.c_int64), P(c.c_int32), P(Sampling), P(c.c_int32), P(c.c_int64), P(c.c_float)]),
        "sgc_get_tensor": (c.c_int, [session, c.c_char_p, P(DLTensor)]),
        "sgc_set_tensor": (c.c_int, [session, c.c_char_p, P(DLTensor)]),
        "sgc_tensor_view": (c.c_int, [session, c.c_char_p, P(DLTensor)]),
        "sgc_save": (c.c_int, [session, c.c_char_p]),
        "sgc_load": (c.c_int, [session, c.c_char_p]),
    }
    for name, (res, args) in sigs.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
