# safetensors reading and writing for the Python tests (numpy arrays; the
# dtypes the tests use). Debian's Python has no safetensors package.
import json, struct
import numpy as np

_NAMES = {np.float32: "F32", np.float64: "F64", np.int64: "I64", np.int32: "I32", np.bool_: "BOOL"}
_TYPES = {v: k for k, v in _NAMES.items()}


def write(path, tensors):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name]
        a = np.array(t.detach().numpy() if hasattr(t, "detach") else t, order="C")  # keeps 0-d arrays 0-d
        header[name] = {"dtype": _NAMES[a.dtype.type], "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        blobs.append(a.tobytes())
        off += a.nbytes
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    out = {}
    for k, v in json.loads(b[8:8 + n]).items():
        s, e = v["data_offsets"]
        out[k] = np.frombuffer(b[8 + n + s:8 + n + e], dtype=_TYPES[v["dtype"]]).reshape(v["shape"])
    return out
