# Trains a model compiled by sgc from Python through ctypes (no other
# dependency): load the .so, create a session, feed the bundled sample's
# batches, print the loss of each step.
# Usage: python3 samples/train_ctypes.py train.so samples/mlp_train_data.safetensors STEPS [DEVICE [nccl[:R:N:IDFILE[:MS]]]]
# (DEVICE: cpu, the default, or cuda:N; nccl: the library's collectives through NCCL, as rank 0 of 1,
# or as rank R of N, each rank on its 1/N of every batch, rank 0 writing the NCCL id to IDFILE;
# MS: the communicator's time-out in milliseconds). With SGC_SAMPLE_HOST_STREAM=1 and a cuda:N device the
# session runs on a stream this script makes (as a host framework passes its own, PyTorch's say).
import ctypes, json, os, struct, sys, time

# The C ABI's structs come from the Python package (python/sgc/_abi.py): the tree's, or a copy
# beside this script (the GPU bundles carry one).
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "python"), HERE]
from sgc._abi import DLDataType, DLDevice, DLTensor, Options  # noqa: E402  (also what the bench scripts import from here)


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    return {k: (v["shape"], raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]) for k, v in header.items()}


def share_nccl_id(lib, options, id_file, wait_s=None):
    """Rank 0 makes the NCCL id and writes it to `id_file` (if any); the other ranks wait for that
    file (at most `wait_s` seconds, if given) and read it into their options."""
    if options.rank == 0:
        if lib.sgc_nccl_unique_id(options.nccl_id):
            sys.exit("sgc_nccl_unique_id: " + lib.sgc_last_error().decode())
        if id_file:
            open(id_file + ".tmp", "wb").write(bytes(options.nccl_id))
            os.rename(id_file + ".tmp", id_file)
        return
    deadline = None if wait_s is None else time.time() + wait_s
    while not os.path.exists(id_file):
        if deadline is not None and time.time() > deadline:
            sys.exit(f"rank {options.rank}: no NCCL id in {id_file} after {wait_s} s")
        time.sleep(0.01)
    ctypes.memmove(options.nccl_id, open(id_file, "rb").read(128), 128)


def host_stream(ordinal):
    """A stream of device `ordinal`'s primary context, made through the CUDA driver as a host framework makes its own."""
    cuda = ctypes.CDLL("libcuda.so.1")
    dev, ctx, stream = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_void_p()
    for name, args in (("cuInit", (0,)), ("cuDeviceGet", (ctypes.byref(dev), ordinal)), ("cuDevicePrimaryCtxRetain", (ctypes.byref(ctx), dev)),
                       ("cuCtxSetCurrent", (ctx,)), ("cuStreamCreate", (ctypes.byref(stream), 1))):
        if getattr(cuda, name)(*args):
            sys.exit(f"{name} failed")
    return stream


def main():
    lib = ctypes.CDLL(os.path.abspath(sys.argv[1]))  # a path: never a search of the library path
    lib.sgc_last_error.restype = ctypes.c_char_p
    session = ctypes.c_void_p()
    device = sys.argv[4] if len(sys.argv) > 4 else "cpu"
    options = Options(ctypes.sizeof(Options), lib.sgc_abi_version(), device.encode(), 0, None, 0, 0, 1)
    if len(sys.argv) > 5 and sys.argv[5].startswith("nccl"):
        spec = sys.argv[5].split(":")
        options.communicator = b"nccl"
        if len(spec) >= 4:
            options.rank, options.world_size = int(spec[1]), int(spec[2])
        if len(spec) == 5:
            options.timeout_ms = int(spec[4])
        share_nccl_id(lib, options, spec[3] if len(spec) >= 4 else None)
    if os.environ.get("SGC_SAMPLE_HOST_STREAM") == "1" and device.startswith("cuda:"):
        options.cuda_stream = host_stream(int(device[5:]))
    if lib.sgc_session_create(ctypes.byref(options), ctypes.byref(session)):
        sys.exit("sgc_session_create: " + lib.sgc_last_error().decode())
    data = read_safetensors(sys.argv[2])
    count = ctypes.c_int32()
    lib.sgc_tensor_count(session, 0, ctypes.byref(count))
    inputs = []
    for i in range(count.value):
        name, dtype, ndim, shape = ctypes.c_char_p(), DLDataType(), ctypes.c_int32(), ctypes.POINTER(ctypes.c_int64)()
        lib.sgc_tensor_info(session, 0, i, ctypes.byref(name), ctypes.byref(dtype), ctypes.byref(ndim), ctypes.byref(shape))
        inputs.append((name.value, dtype, ndim.value, shape))
    for step in range(int(sys.argv[3])):
        for name, dtype, ndim, shape in inputs:
            full_shape, raw = data[name.decode()]
            one = len(raw) // full_shape[0]  # one batch; this rank's share of it
            share = one // options.world_size
            at = (step % full_shape[0]) * one + options.rank * share
            batch = ctypes.create_string_buffer(raw[at:at + share], share)
            t = DLTensor(ctypes.cast(batch, ctypes.c_void_p), DLDevice(1, 0), ndim, dtype, shape, None, 0)
            if lib.sgc_set_input(session, name, ctypes.byref(t)):
                sys.exit("sgc_set_input: " + lib.sgc_last_error().decode())
        loss = ctypes.c_double()
        if lib.sgc_train_step(session, ctypes.byref(loss)):
            sys.exit("sgc_train_step: " + lib.sgc_last_error().decode())
        if options.rank == 0:
            print(json.dumps({"step": step, "loss": loss.value}))
    lib.sgc_session_destroy(session)


if __name__ == "__main__":
    main()
