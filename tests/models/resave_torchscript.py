# Saves TorchScript archives again with the torch that runs this script (1.13 here): each
# NAME.torch-X.pt it can load becomes NAME.torch-VERSION.pt, written by that version's own
# serializer (its code printer, pickler and zip writer), with a NAME.torch-VERSION.json beside it
# that records where it came from. Debian's torch 1.13 has neither transformers nor torchvision,
# so it cannot trace the suite's models itself; it loads archives that torch 2.11 traced with
# operators 1.13 knows (export_torchscript.py --eager-attention) and checks that its loaded module
# gives the first loss torch 2.11 recorded.
# INDIR also holds each model's batches (NAME.data.safetensors, from its fixture).
# Usage: /usr/bin/python3 resave_torchscript.py INDIR OUTDIR NAME.torch-X.pt ...
import json, os, sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pyutil"))
import st  # noqa: E402


def main():
    indir, out, files = sys.argv[1], sys.argv[2], sys.argv[3:]
    os.makedirs(out, exist_ok=True)
    version = torch.__version__.split("+")[0]
    for f in files:
        name = f.split(".torch-")[0]
        info = json.load(open(os.path.join(indir, f[:-3] + ".json")))
        m = torch.jit.load(os.path.join(indir, f))
        data = st.read(os.path.join(indir, name + ".data.safetensors"))
        loss = m(*[torch.from_numpy(data[k][0].copy()) for k in info["inputs"]]).item()
        ref = info["traced_first_loss"]
        if abs(loss - ref) > 1e-5 * abs(ref):
            sys.exit(f"{f}: torch {version} computes the first loss {loss}, torch 2.11 {ref}")
        info["resaved_first_loss"] = loss
        path = os.path.join(out, f"{name}.torch-{version}.pt")
        torch.jit.save(m, path)
        info.update(torch=torch.__version__, resaved_from=f, bytes=os.path.getsize(path))
        with open(os.path.join(out, f"{name}.torch-{version}.json"), "w") as o:
            json.dump(info, o, indent=1, sort_keys=True)
        print(name, "saved by torch", version, "from", f, flush=True)


if __name__ == "__main__":
    main()
