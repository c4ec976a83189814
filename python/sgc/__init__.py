"""sgc from Python: compile a model into a training library, load it, and train.

    import sgc
    sgc.compile("model.onnx", "train.so", optimizer="adamw", lr=1e-3, target="cpu")   # or a traced .pt
    lib = sgc.load("train.so")
    with lib.session() as s:
        for x, y in batches:
            loss = s.step(x=x, y=y)      # numpy arrays, CPU torch tensors: anything with __dlpack__
        s.save("ckpt.safetensors")

Pure Python over the library's C ABI (ctypes); numpy and torch are optional. Every failure of
the ABI is an SgcError carrying the library's own message (sgc_last_error).
"""
import ctypes
import os
import shutil
import subprocess

from . import _abi
from ._tensors import capsule, describe, dl_tensor

__all__ = ["SgcError", "compile", "load", "Library", "Session"]


class SgcError(RuntimeError):
    """A failed call into sgc: `status` is the ABI's code (0 for a failed compile), the message is
    sgc's own (the library's sgc_last_error, or the compiler's stderr)."""

    def __init__(self, message, status=0):
        super().__init__(message)
        self.status = status


def _sgc_binary(explicit=None):
    """The sgc command: `explicit`, else $SGC, else sgc on the PATH, else the source tree's build."""
    tree = os.path.join(os.path.dirname(__file__), "..", "..", "build", "driver", "sgc")
    for candidate in (explicit, os.environ.get("SGC"), shutil.which("sgc"), tree):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise SgcError("no sgc command: pass sgc=PATH, set $SGC, or put sgc on the PATH")


def _flag_args(flags):
    args = []
    for name, value in flags.items():
        if value is None or value is False:
            continue
        flag = "--" + name.replace("_", "-")
        if value is True:
            args.append(flag)
        elif isinstance(value, dict):  # dim={"B": 16} -> --dim B=16
            args += [flag, ",".join(f"{k}={v}" for k, v in value.items())]
        elif isinstance(value, (list, tuple)):
            args += [flag, ",".join(str(v) for v in value)]
        else:
            args += [flag, str(value)]
    return args


def compile(model, output, *, sgc=None, **flags):
    """Compiles `model` (an ONNX file or a TorchScript archive) into the training library `output`
    with `sgc compile`.

    Flags are sgc compile's, with underscores for dashes: optimizer="adamw", lr=1e-3,
    weight_decay=0.01, precision="bf16", target="cpu,sm_90", dim={"B": 16}, recompute="cheap",
    stats=True, input_type="input_ids=i64[2,16]" (an archive without traced inputs). Returns
    `output`; raises SgcError with sgc's message when it fails."""
    cmd = [_sgc_binary(sgc), "compile", os.fspath(model), "-o", os.fspath(output), "--quiet"] + _flag_args(flags)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise SgcError(proc.stderr.strip() or f"sgc compile exited with status {proc.returncode}")
    return output


def load(path):
    """Loads a library compiled by sgc (its C ABI is checked against this package's)."""
    return Library(path)


class Library:
    """A loaded training library: make sessions of it with session()."""

    def __init__(self, path):
        self.path = os.fspath(path)
        try:
            self._lib = ctypes.CDLL(os.path.abspath(self.path))
        except OSError as e:
            raise SgcError(f"{self.path}: cannot load: {e}") from None
        if not hasattr(self._lib, "sgc_abi_version"):
            raise SgcError(f"{self.path}: not a library compiled by sgc (no sgc_abi_version)")
        _abi.declare(self._lib)
        version = self._lib.sgc_abi_version()
        if version != _abi.ABI_VERSION:
            raise SgcError(f"{self.path}: C ABI version {version}, this package speaks {_abi.ABI_VERSION}")

    def session(self, device="cpu", threads=0, stream=None, communicator=None, rank=0, world_size=1, nccl_id=None, timeout_ms=0):
        """A training session on `device` ("cpu" or "cuda:N"); `threads`: the CPU's worker threads
        (0: one a core); `stream`: on a GPU, the host's stream the session works on (a
        torch.cuda.Stream, such as torch.cuda.current_stream() inside `with torch.cuda.stream(...)`,
        or a CUstream handle; default, or the legacy default stream: a stream of its own).
        For data-parallel libraries: `communicator` "mpi" or "nccl", this process's `rank` of
        `world_size`, the NCCL id every rank shares (`nccl_id`, 128 bytes: rank 0 makes it with
        nccl_unique_id() and hands it to the others), `timeout_ms` for a collective (0: the
        library's default). Close it (or use it in a with block) to free its memory."""
        return Session(self, device, threads, stream, communicator, rank, world_size, nccl_id, timeout_ms)

    def nccl_unique_id(self):
        """A new NCCL unique id (128 bytes) for the ranks of a "nccl" communicator."""
        buf = (ctypes.c_uint8 * 128)()
        if self._lib.sgc_nccl_unique_id(buf):
            raise SgcError("sgc_nccl_unique_id: " + (self._lib.sgc_last_error() or b"").decode(errors="replace"))
        return bytes(buf)

    def __repr__(self):
        return f"sgc.Library({self.path!r})"


class Session:
    """A session of a library: its inputs, parameters and optimizer state, and the step.

    Tensors given to it may be numpy arrays, torch tensors on the CPU or the session's GPU, or
    anything else with __dlpack__, in the dtype and shape the library takes (inputs() lists them);
    they are read where they lie, never copied on the host side (a GPU's are copied into the
    session's memory on its stream)."""

    def __init__(self, library, device="cpu", threads=0, stream=None, communicator=None, rank=0, world_size=1, nccl_id=None, timeout_ms=0):
        self._library, self._lib, self._s = library, library._lib, ctypes.c_void_p()
        handle = getattr(stream, "cuda_stream", stream)  # a torch.cuda.Stream, or a handle
        # 0, the legacy default stream, is not one a session can share (sgc.h): the session's own
        # stream then, and CUDA inputs must be complete (torch.cuda.synchronize()) when given.
        self._stream = int(handle) if handle else None
        comm = communicator.encode() if communicator else None
        opts = _abi.Options(ctypes.sizeof(_abi.Options), _abi.ABI_VERSION, device.encode(), threads, comm, timeout_ms, rank, world_size)
        if nccl_id is not None:
            if len(nccl_id) != 128:
                raise SgcError(f"nccl_id has {len(nccl_id)} bytes, expected 128 (from nccl_unique_id())")
            ctypes.memmove(opts.nccl_id, bytes(nccl_id), 128)
        opts.cuda_stream = self._stream
        self._check(self._lib.sgc_session_create(ctypes.byref(opts), ctypes.byref(self._s)), "sgc_session_create")
        self.device = device

    # ---- errors and self-description ----
    def _check(self, status, what):
        if status:
            message = (self._lib.sgc_last_error() or b"").decode(errors="replace")
            raise SgcError(f"{what}: {message or _abi.STATUS.get(status, 'status ' + str(status))}", status)

    def _open(self):
        if not self._s:
            raise SgcError("the session is closed")
        return self._s

    def _tensors(self, kind):
        count = ctypes.c_int32()
        self._check(self._lib.sgc_tensor_count(self._open(), kind, ctypes.byref(count)), "sgc_tensor_count")
        out = {}
        for i in range(count.value):
            name, dtype, ndim, shape = ctypes.c_char_p(), _abi.DLDataType(), ctypes.c_int32(), ctypes.POINTER(ctypes.c_int64)()
            self._check(self._lib.sgc_tensor_info(self._s, kind, i, ctypes.byref(name), ctypes.byref(dtype), ctypes.byref(ndim),
                                                  ctypes.byref(shape)), "sgc_tensor_info")
            out[name.value.decode()] = (describe(dtype), tuple(shape[k] for k in range(ndim.value)))
        return out

    def inputs(self):
        """{name: (dtype, shape)} of the inputs a step takes."""
        return self._tensors(_abi.TENSOR_INPUT)

    def parameter_names(self):
        """The parameters' names, as the model names them."""
        return list(self._tensors(_abi.TENSOR_PARAMETER))

    def description(self):
        """What runs the session: "cpu (N threads)", or the GPU with its code and GEMM library."""
        text = ctypes.c_char_p()
        self._check(self._lib.sgc_device_description(self._open(), ctypes.byref(text)), "sgc_device_description")
        return text.value.decode()

    def memory_plan_bytes(self):
        """The bytes of the step's planned arena (on the session's device)."""
        n = ctypes.c_uint64()
        self._check(self._lib.sgc_memory_plan_bytes(self._open(), ctypes.byref(n)), "sgc_memory_plan_bytes")
        return n.value

    # ---- steps ----
    def _feed(self, inputs):
        for name, value in inputs.items():
            with dl_tensor(value, name, self._stream) as tensor:
                self._check(self._lib.sgc_set_input(self._open(), name.encode(), ctypes.byref(tensor)), f"input '{name}'")

    def step(self, **inputs):
        """One training step (forward, backward, optimizer) on these inputs, by name; returns the loss.
        Inputs not given keep what the step before was given."""
        self._feed(inputs)
        loss = ctypes.c_double()
        self._check(self._lib.sgc_train_step(self._open(), ctypes.byref(loss)), "sgc_train_step")
        return loss.value

    def eval_step(self, **inputs):
        """The forward pass only, on these inputs; returns the loss and updates nothing."""
        self._feed(inputs)
        loss = ctypes.c_double()
        self._check(self._lib.sgc_eval_step(self._open(), ctypes.byref(loss)), "sgc_eval_step")
        return loss.value

    def trace_next_step(self, path):
        """Writes the next step's Chrome trace (every launch with its kernel, bytes, time and, on a
        GPU, stream; Perfetto opens it) to `path` when that step ends."""
        self._check(self._lib.sgc_trace_next_step(self._open(), os.fspath(path).encode()), "sgc_trace_next_step")

    def set_lr(self, lr):
        """Sets the learning rate of the steps from the next one on."""
        self._check(self._lib.sgc_set_learning_rate(self._open(), float(lr)), "sgc_set_learning_rate")

    # ---- parameters and checkpoints ----
    def state_dict(self, state=False):
        """{name: numpy array} of the parameters (copies), and with state=True the optimizer's state
        too (its moments and step counter). Needs numpy."""
        import numpy as np
        kinds = [_abi.TENSOR_PARAMETER] + ([_abi.TENSOR_STATE] if state else [])
        out = {}
        for kind in kinds:
            for name, (dtype, shape) in self._tensors(kind).items():
                array = np.empty(shape, dtype=np.dtype(dtype) if dtype != "bfloat16" else np.uint16)
                with dl_tensor(array, name) as tensor:
                    if dtype == "bfloat16":
                        tensor.dtype = _abi.DLDataType(_abi.KDL_BFLOAT, 16, 1)
                    self._check(self._lib.sgc_get_tensor(self._s, name.encode(), ctypes.byref(tensor)), f"parameter '{name}'")
                out[name] = array
        return out

    def dlpack(self, name):
        """A DLPack capsule over parameter or state tensor `name` where the session holds it (host
        memory, or its GPU), without a copy: torch.from_dlpack(s.dlpack(name)) shares it, and a
        write into it is what the next step reads. It keeps the session alive."""
        t = _abi.DLTensor()
        self._check(self._lib.sgc_tensor_view(self._open(), name.encode(), ctypes.byref(t)), f"tensor '{name}'")
        return capsule(t, self)

    def parameters(self):
        """{name: array} viewing each parameter where the session holds it, without copies: numpy
        arrays on the CPU (torch.from_numpy(view) shares one too), torch tensors on a GPU (through
        dlpack()). A write into one is what the next step reads; each step's update shows in it.
        A view keeps the session alive. Needs numpy (CPU) or torch (GPU)."""
        out = {}
        if self.device != "cpu":
            import torch
            return {name: torch.from_dlpack(self.dlpack(name)) for name in self._tensors(_abi.TENSOR_PARAMETER)}
        import numpy as np
        for name, (dtype, shape) in self._tensors(_abi.TENSOR_PARAMETER).items():
            t = _abi.DLTensor()
            self._check(self._lib.sgc_tensor_view(self._open(), name.encode(), ctypes.byref(t)), f"parameter '{name}'")
            np_dtype = np.dtype(np.uint16 if dtype == "bfloat16" else dtype)
            count = 1
            for d in shape:
                count *= d
            memory = type("SessionBytes", (ctypes.c_char * (count * np_dtype.itemsize),), {}).from_address(t.data)
            memory.session = self  # the view's base holds the session, whose arena it shows
            out[name] = np.frombuffer(memory, dtype=np_dtype).reshape(shape)
        return out

    def load_state_dict(self, tensors, strict=True):
        """Overwrites parameters (or state) by name from {name: tensor}, dtype and shape as the
        session holds them. With strict (the default) every name must be one of the session's;
        with strict=False names it lacks are left out (a PyTorch state_dict's tied aliases and
        counters, say) and, as torch's load_state_dict, it returns (missing, unexpected): the
        parameters not given and the names left out."""
        known = set(self._tensors(_abi.TENSOR_PARAMETER)) | set(self._tensors(_abi.TENSOR_STATE))
        unexpected = sorted(n for n in tensors if n not in known)
        for name, value in tensors.items():
            if strict or name in known:
                with dl_tensor(value, name) as tensor:
                    self._check(self._lib.sgc_set_tensor(self._open(), name.encode(), ctypes.byref(tensor)), f"parameter '{name}'")
        if not strict:
            missing = sorted(n for n in self._tensors(_abi.TENSOR_PARAMETER) if n not in tensors)
            return missing, unexpected

    def save(self, path):
        """Writes the parameters and optimizer state to a safetensors file (atomically)."""
        self._check(self._lib.sgc_save(self._open(), os.fspath(path).encode()), "sgc_save")

    def load(self, path):
        """Loads a safetensors checkpoint (parameters, and the optimizer state it holds)."""
        self._check(self._lib.sgc_load(self._open(), os.fspath(path).encode()), "sgc_load")

    # ---- decoding (libraries compiled with --mode decode) ----
    def decode_info(self):
        """The paged cache's sizes and occupancy: block_size, blocks, max_seqs, max_context,
        tokens_per_step, vocab, layers, free_pages, live_seqs and the bytes of its parts."""
        info = _abi.DecodeInfo()
        self._check(self._lib.sgc_decode_info_get(self._open(), ctypes.byref(info)), "sgc_decode_info_get")
        return {name: getattr(info, name) for name, _ in _abi.DecodeInfo._fields_}

    def _logits(self, rows):
        vocab = self.decode_info()["vocab"]
        return (ctypes.c_float * (max(rows, 1) * vocab))(), vocab

    @staticmethod
    def _out(out, rows, vocab):
        """A caller's float32 numpy array of [rows, vocab] (or [vocab] for one row) to write logits into."""
        if out.dtype.name != "float32" or out.size != rows * vocab or not out.flags["C_CONTIGUOUS"] or not out.flags["WRITEABLE"]:
            raise ValueError(f"out must be a writable C-contiguous float32 array of {rows} x {vocab}, got {out.dtype} {out.shape}")
        return out.ctypes.data_as(ctypes.POINTER(ctypes.c_float))

    @staticmethod
    def _sampling(sample, count):
        """sample: None, one dict of temperature, top_k, top_p and seed (every row), or `count` of them."""
        if sample is None:
            return None
        rows = [sample] * count if isinstance(sample, dict) else list(sample)
        if len(rows) != count:
            raise ValueError(f"sample: {len(rows)} entries for {count} sequences")
        arr = (_abi.Sampling * count)()
        for a, r in zip(arr, rows):
            a.temperature, a.top_k, a.top_p, a.seed = r.get("temperature", 1.0), r.get("top_k", 0), r.get("top_p", 1.0), r.get("seed", 0)
        return arr

    def add(self, prompt, greedy=False, out=None, sample=None):
        """Adds a sequence and prefills its prompt (token ids); returns (seq, the logits of the
        prompt's last token), or with greedy=True (seq, its greedy next token), chosen where the
        step runs (no logits come back), or with `sample` (a dict of temperature, top_k, top_p and
        seed) (seq, its sampled next token), drawn where the step runs. With `out` (a float32
        numpy array of vocab) the logits are written there and it is returned instead of a list.
        SgcError with status 10 (out of pages) when the cache is full."""
        ids = (ctypes.c_int64 * len(prompt))(*prompt)
        seq = ctypes.c_int32()
        if greedy or sample is not None:
            nxt = ctypes.c_int64()
            self._check(self._lib.sgc_seq_add_sample(self._open(), ids, len(prompt), self._sampling(sample, 1), ctypes.byref(seq),
                                                     ctypes.byref(nxt), None), "sgc_seq_add_sample")
            return seq.value, nxt.value
        if out is not None:
            ptr = self._out(out, 1, self.decode_info()["vocab"])
            self._check(self._lib.sgc_seq_add(self._open(), ids, len(prompt), ctypes.byref(seq), ptr), "sgc_seq_add")
            return seq.value, out
        logits, vocab = self._logits(1)
        self._check(self._lib.sgc_seq_add(self._open(), ids, len(prompt), ctypes.byref(seq), logits), "sgc_seq_add")
        return seq.value, list(logits[:vocab])

    def add_many(self, prompts, sample=None):
        """Adds a sequence for each prompt (lists of token ids) and prefills them together, packed
        into as few steps as their tokens fill; returns (seqs, next tokens), each token greedy or
        drawn by `sample` (one dict for all, or one per prompt) where the step runs. All or none:
        SgcError with status 10 (out of pages) adds nothing."""
        if not prompts:
            return [], []
        flat = [t for p in prompts for t in p]
        tokens = (ctypes.c_int64 * max(len(flat), 1))(*flat)
        lengths = (ctypes.c_int32 * len(prompts))(*[len(p) for p in prompts])
        seqs, nxt = (ctypes.c_int32 * len(prompts))(), (ctypes.c_int64 * len(prompts))()
        self._check(self._lib.sgc_seqs_add(self._open(), len(prompts), tokens, lengths, self._sampling(sample, len(prompts)), seqs, nxt, None),
                    "sgc_seqs_add")
        return list(seqs), list(nxt)

    def fork(self, seq):
        """A new sequence sharing every token of `seq` (its pages, copied on write); returns it."""
        child = ctypes.c_int32()
        self._check(self._lib.sgc_seq_fork(self._open(), seq, ctypes.byref(child)), "sgc_seq_fork")
        return child.value

    def free(self, seq):
        """Frees sequence `seq` and the pages no other sequence shares."""
        self._check(self._lib.sgc_seq_free(self._open(), seq), "sgc_seq_free")

    def length(self, seq):
        """The tokens (prompt and decoded) sequence `seq` holds."""
        n = ctypes.c_int32()
        self._check(self._lib.sgc_seq_length(self._open(), seq, ctypes.byref(n)), "sgc_seq_length")
        return n.value

    def decode(self, seqs, tokens, greedy=False, out=None, sample=None):
        """One decoding step: appends tokens[i] to sequence seqs[i]; returns each one's next-token
        logits (a list of vocab floats each), or with greedy=True each one's greedy next token,
        or with `sample` (one dict of temperature, top_k, top_p and seed for all, or one per
        sequence) each one's sampled next token, both chosen where the step runs. A draw depends
        on the seed, the position and the logits alone. With `out` (a float32 numpy array of
        len(seqs) x vocab) the logits are written there and it is returned: no Python lists for
        large vocabularies."""
        if len(seqs) != len(tokens):
            raise ValueError(f"decode: {len(seqs)} sequences but {len(tokens)} tokens")
        s = (ctypes.c_int32 * len(seqs))(*seqs)
        t = (ctypes.c_int64 * len(tokens))(*tokens)
        if greedy or sample is not None:
            nxt = (ctypes.c_int64 * len(seqs))()
            self._check(self._lib.sgc_decode_step_sample(self._open(), len(seqs), s, t, self._sampling(sample, len(seqs)), nxt, None),
                        "sgc_decode_step_sample")
            return list(nxt)
        if out is not None:
            ptr = self._out(out, len(seqs), self.decode_info()["vocab"])
            self._check(self._lib.sgc_decode_step(self._open(), len(seqs), s, t, ptr), "sgc_decode_step")
            return out
        logits, vocab = self._logits(len(seqs))
        self._check(self._lib.sgc_decode_step(self._open(), len(seqs), s, t, logits), "sgc_decode_step")
        return [list(logits[i * vocab:(i + 1) * vocab]) for i in range(len(seqs))]

    def generate(self, prompts, max_new_tokens, temperature=0.0, top_k=0, top_p=1.0, seed=0):
        """Decodes up to `max_new_tokens` new tokens for each prompt (lists of token ids), all of
        them batched in each step, and returns the new ids of each. temperature 0 is greedy (the
        first of equal maxima); otherwise tokens are sampled from the softmax of logits /
        temperature, cut to the top_k largest (0: all) and then to the fewest largest whose
        probability reaches top_p, prompt i drawing with seed * 1000003 + i. Both are chosen where
        the step runs (no logits come back), as sgc generate chooses them: the same call gives
        sgc generate's tokens, and the same tokens again. A sequence also stops at the library's
        max_context; when the cache runs out of pages, the newest sequence waits and is
        prefilled again later (its draws, counted by position, do not change)."""
        info = self.decode_info()
        out = [[] for _ in prompts]
        if max_new_tokens < 1:
            return out
        sampling = [{"temperature": max(temperature, 0.0), "top_k": top_k, "top_p": top_p, "seed": (seed * 1_000_003 + i) % (1 << 64)}
                    for i in range(len(prompts))]

        def done(i):
            return len(out[i]) >= max_new_tokens or len(prompts[i]) + len(out[i]) >= info["max_context"]

        pending, active = list(range(len(prompts))), {}  # active: prompt -> seq
        try:
            while pending or active:
                # Admit what fits, prefilled together: as many as there are free slots, halved
                # while the pages run short.
                k = min(len(pending), info["max_seqs"] - len(active))
                while k:
                    batch = pending[:k]
                    try:
                        seqs, nexts = self.add_many([list(prompts[i]) + out[i] for i in batch], sample=[sampling[i] for i in batch])
                    except SgcError as e:
                        if e.status != _abi.OUT_OF_PAGES or (k == 1 and not active):
                            raise
                        if k == 1:
                            break
                        k //= 2
                        continue
                    del pending[:k]
                    for i, seq, nxt in zip(batch, seqs, nexts):
                        out[i].append(nxt)
                        if done(i):
                            self.free(seq)
                        else:
                            active[i] = seq
                    k = min(len(pending), info["max_seqs"] - len(active))
                if not active:
                    continue
                order = list(active)
                try:
                    rows = self.decode([active[i] for i in order], [out[i][-1] for i in order], sample=[sampling[i] for i in order])
                except SgcError as e:
                    if e.status != _abi.OUT_OF_PAGES or len(active) < 2:
                        raise
                    newest = order[-1]  # it waits, and is prefilled again later (its last token too)
                    self.free(active.pop(newest))
                    pending.insert(0, newest)
                    continue
                for i, nxt in zip(order, rows):
                    out[i].append(nxt)
                    if done(i):
                        self.free(active.pop(i))
        finally:
            for seq in active.values():
                self.free(seq)
        return out

    # ---- lifetime ----
    def close(self):
        """Frees the session's memory; later calls raise SgcError."""
        if self._s:
            self._lib.sgc_session_destroy(self._s)
            self._s = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        return f"sgc.Session({self._library.path!r}, device={self.device!r})"
