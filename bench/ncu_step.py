# Nsight Compute over the kernels of a compiled library's first training step, summarized kernel
# by kernel with the ops each runs (read from the library's program), so that ncu's sgc_k15_gpu
# reads as "Cast+Add+LayerNormalization+Cast". The step is gpu_train.py's sgc side (the benchmark's
# weights and batch); its first step runs launch by launch, before the CUDA graph is captured.
# ncu flushes the caches before each kernel: a kernel that reads its producer's output from L2 in
# the step reads it from memory here.
# Usage (on the device):   python3 bench/ncu_step.py run LIB.so[.xz] MODEL [KERNELS] [SECTION ...]
#   KERNELS: how many of our kernels to profile from the step's start (default 400: a GPT-2 step);
#   sections default to SpeedOfLight, LaunchStats, Occupancy; writes $OUT/MODEL_ncu.csv.
# Here, on a CSV already collected:  python3 bench/ncu_step.py summary MODEL_ncu.csv LIB.so[.xz]
#   [KERNEL]: every metric of one kernel's first launch.
import collections, csv, json, lzma, os, struct, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SECTIONS = ["SpeedOfLight", "LaunchStats", "Occupancy"]
COLUMNS = [("Duration", "us"), ("DRAM Throughput", "DRAM %"), ("L2 Cache Throughput", "L2 %"), ("Compute (SM) Throughput", "SM %"),
           ("Registers Per Thread", "regs"), ("Grid Size", "blocks"), ("Block Size", "threads"), ("Waves Per SM", "waves"),
           ("Achieved Occupancy", "occupancy %")]


def library_bytes(path):
    if path.endswith(".xz") or not os.path.exists(path):
        with lzma.open(path if path.endswith(".xz") else path + ".xz") as f:
            return f.read()
    with open(path, "rb") as f:
        return f.read()


def program(path):
    """The program JSON in the library's .sgc_program section (an ELF64 little-endian file)."""
    elf = library_bytes(path)
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    def section(i):  # (name offset, file offset, size)
        name, = struct.unpack_from("<I", elf, shoff + i * shentsize)
        off, size = struct.unpack_from("<QQ", elf, shoff + i * shentsize + 0x18)
        return name, off, size
    strtab = section(shstrndx)
    for i in range(shnum):
        name, off, size = section(i)
        end = elf.index(b"\0", strtab[1] + name)
        if elf[strtab[1] + name:end] == b".sgc_program":
            return json.loads(elf[off:off + size].rstrip(b"\0"))
    sys.exit(f"{path}: no .sgc_program section (not a library sgc compiled)")


def kernel_ops(prog):
    """Kernel name -> the labels of the launches whose GPU form (or CPU kernel, if none) or
    product's epilogue runs it."""
    names, ops = prog["kernel_names"], collections.defaultdict(list)
    for launch in prog["launches"]:
        calls = launch.get("gpu") if launch.get("gpu") is not None else [launch]
        calls = calls + ([launch["epilogue"]] if "epilogue" in launch else [])
        for call in calls:
            k = call.get("kernel", -1)
            if k >= 0 and launch.get("label", "") not in ops[names[k]]:
                ops[names[k]].append(launch.get("label", ""))
    return ops


def number(text):
    text = text.replace(",", "")
    try:
        return float(text)
    except ValueError:
        return None


def launches(csv_path):
    """ncu's --csv --page details output: (launch ID, kernel name) -> {metric: (value, unit)}."""
    with open(csv_path) as f:
        rows = csv.DictReader(line for line in f if line.startswith('"'))  # skips ncu's ==PROF== lines
        by = collections.OrderedDict()
        for r in rows:
            by.setdefault((r["ID"], r["Kernel Name"]), {})[r["Metric Name"]] = (r["Metric Value"], r["Metric Unit"])
    return by


def microseconds(value, unit):
    scale = {"ns": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "nsecond": 1e-3}.get(unit, 1.0)
    return (number(value) or 0.0) * scale


def summary(csv_path, lib, only=None):
    ops, by = kernel_ops(program(lib)), launches(csv_path)
    if only:
        first = next(((i, k) for i, k in by if k == only), None)
        if not first:
            sys.exit(f"{csv_path}: no launch of {only}")
        print(f"{only}: {', '.join(ops.get(only, ['?']))}")
        for metric, (value, unit) in by[first].items():
            if metric:
                print(f"  {metric:48} {value} {unit}")
        return
    kernels = collections.OrderedDict()
    for (_, name), metrics in by.items():
        k = kernels.setdefault(name, {"n": 0, "us": 0.0, "rows": []})
        k["n"] += 1
        k["us"] += microseconds(*metrics.get("Duration", ("0", "us")))
        k["rows"].append(metrics)
    total = sum(k["us"] for k in kernels.values())
    print(f"{len(by)} launches of {len(kernels)} kernels, {total:.1f} us (mean over each kernel's launches; ops from {os.path.basename(lib)})")
    print(f"{'us':>9} {'n':>4}  {'kernel':24} " + " ".join(f"{title:>11}" for metric, title in COLUMNS[1:]) + "  ops")
    for name, k in sorted(kernels.items(), key=lambda kv: -kv[1]["us"]):
        cells = []
        for metric, _ in COLUMNS[1:]:
            vals = [number(r[metric][0]) for r in k["rows"] if metric in r and number(r[metric][0]) is not None]
            cells.append(f"{sum(vals) / len(vals):11.4g}" if vals else f"{'-':>11}")
        print(f"{k['us']:9.1f} {k['n']:4d}  {name[:24]:24} " + " ".join(cells) + "  " + "; ".join(ops.get(name, ["?"]))[:90])


def run(lib, model, count, sections):
    sys.path.insert(0, HERE)
    import gpu_models as gm, gpu_train as gt
    sys.path.insert(0, os.path.join(HERE, "..", "tests", "pyutil"))
    import st
    out = os.environ.get("OUT", ".")
    so = gt.unpacked(lib.removesuffix(".xz"))
    weights = os.path.join(out, f"{model}_init.safetensors")
    st.write(weights, {k: v.clone() for k, v in gm.make(model).state_dict().items()})
    csv_path = os.path.join(out, f"{model}_ncu.csv")
    cmd = ["ncu", "--clock-control", "none", *sum((["--section", s] for s in sections), []), "-k", "regex:^sgc_",
           "--launch-count", str(count), "--csv", "--page", "details", sys.executable, gt.__file__, "--sgc", so, weights, model]
    with open(csv_path, "w") as f:
        proc = subprocess.run(cmd, stdout=f, env=dict(os.environ, **gt.library_env()))
    os.remove(weights)
    if proc.returncode:
        sys.exit(f"ncu exited with status {proc.returncode}")
    summary(csv_path, so)


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "summary":
        summary(sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None)
    elif len(sys.argv) >= 4 and sys.argv[1] == "run":
        count = int(sys.argv[4]) if len(sys.argv) > 4 else 400
        run(sys.argv[2], sys.argv[3], count, sys.argv[5:] or DEFAULT_SECTIONS)
    else:
        sys.exit("usage: ncu_step.py run LIB.so[.xz] MODEL [KERNELS] [SECTION ...] | summary CSV LIB.so[.xz] [KERNEL]")


if __name__ == "__main__":
    main()
