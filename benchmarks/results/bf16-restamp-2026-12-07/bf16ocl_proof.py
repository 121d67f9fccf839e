"""Preprocess each measured opencl.json entry's builds with the sources before (HEAD) and after the
bfloat16 edit; identical preprocessed text (blank lines aside) = the entry's code is unchanged."""
import copy, itertools, json, subprocess, sys, tempfile, warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
import numpy as np
warnings.simplefilter("ignore")
import hal
from hal.spec import TensorGeometry, pool2d_spec, adaptive_pool2d_spec, conv2d_spec, batch_norm_spec
from hal.backends.opencl import SCHEMAS, QUANT_HEADER

OLD, NEW = Path("/tmp/bf16ocl_old"), Path("/work/main/kernels_cl")
CLANG = "clang-15"
dev = hal.device("opencl:0")
pocl = dev.backend
h200 = copy.copy(pocl)
h200.info = replace(pocl.info, name="NVIDIA H200", compute_units=132, local_mem_bytes=49152, max_work_group=1024,
                    extras=(("device_type", "GPU"),))
h200._ptx_maxnan = True

def source(folder, file, defines):
    s = (folder / "hal_prelude.h").read_text()
    if defines.get("DTYPE_INT8") or defines.get("DTYPE_UINT8"):
        s += f'\n#line 1 "{QUANT_HEADER}"\n' + (folder / QUANT_HEADER).read_text()
    return s + f'\n#line 1 "{file}"\n' + (folder / file).read_text()

def pre(folder, file, defines):
    with tempfile.NamedTemporaryFile("w", suffix=".cl", delete=False) as f:
        f.write(source(folder, file, defines))
    r = subprocess.run([CLANG, "-E", "-P", "-x", "cl", "-cl-std=CL1.2", *[f"-D{k}={v}" for k, v in sorted(defines.items())], f.name],
                       capture_output=True, text=True)
    Path(f.name).unlink()
    out = "\n".join(l for l in r.stdout.splitlines() if l.strip())
    return r.returncode, out, r.stderr[-300:]

def builds(entry):
    """(file, defines) the launchers build for this entry's key and params (pads 0 and 1, with and
    without indices: what the entry may serve)."""
    be = h200 if entry["match"] == "NVIDIA H200" else pocl
    key, kernel = entry["key"], entry["kernel"]
    p = {**SCHEMAS[kernel].defaults(), **entry["params"]}
    dt = np.dtype(key["dtype"])
    out = []
    if kernel == "pool2d":
        k = int(key["kernel"][0]); s = int(key["stride"][0])
        g = TensorGeometry(key["n"], key["c"], key["h"], key["w"], key["layout"], dt)
        for pad, idx in itertools.product((0, 1), (False, True)):
            if pad * 2 > k or (idx and key["kind"] != "max"):
                continue
            spec = pool2d_spec(key["kind"], g, k, s, pad, 1, False, True, None, idx)
            if dt in (np.dtype(np.int8), np.dtype(np.uint8)):
                spec = replace(spec, zero_point=3) if hasattr(spec, "zero_point") else spec
            file, name, d, mode, band = be._pool2d_build(spec, be._params("pool2d", p))
            out.append((file, d))
    elif kernel == "adaptive_pool2d":
        g = TensorGeometry(key["n"], key["c"], key["h"], key["w"], key["layout"], dt)
        for idx in ((False, True) if key["kind"] == "max" else (False,)):
            spec = adaptive_pool2d_spec(key["kind"], g, (key["out_h"], key["out_w"]), idx)
            name, d, items = be._adaptive_build(spec, be._params("adaptive_pool2d", p))
            out.append(("adaptive_pool2d.cl", d))
    elif kernel == "conv2d":
        cin, cout = key["c"], key["k"]
        groups = 1 if key["groups"] == "dense" else cin
        g = TensorGeometry(key["n"], cin, key["h"], key["w"], key["layout"], dt)
        k = int(key["kernel"][0])
        spec = conv2d_spec(g, (cout, cin // groups, k, k), False, None, int(key["stride"][0]), 1, 1, groups)
        pp = be._params("conv2d", p)
        kdim = (cin // groups) * k * k
        algo = pp["ALGO"] or (2 if kdim >= 32 and cout // groups >= 16 else 1)
        base = be._base_defines(spec)
        d = {**base, "CONV_ALGO": 2, "TILE": pp["TILE"], "TK": pp["TK"]} if algo == 2 else \
            {**base, "CONV_ALGO": 1, "WG": pp["WG"], "VEC": pp["VEC"]}
        out.append(("conv2d.cl", d))
    elif kernel == "batch_norm":
        g = TensorGeometry(key["n"], key["c"], key["h"], key["w"], key["layout"], dt)
        for running in (False, True):
            spec = batch_norm_spec(g, key["mode"] == "train", 0.1, 1e-5, running or key["mode"] == "infer")
            pp = be._params("batch_norm", p)
            if spec.training and key["layout"] == "NCHW" and spec.h * spec.w < pp["VEC"]:
                pp = {**pp, "VEC": 1}
            out.append(("batch_norm.cl", be._batch_norm_defines(spec, pp)))
    return out

table = json.loads(Path("/work/main/hal/tuning/tables/opencl.json").read_text())
jobs = []
for i, e in enumerate(table["entries"]):
    if "source_hash" not in e:
        continue
    for file, d in builds(e):
        jobs.append((i, e["match"], e["kernel"], file, d))
# drop duplicate builds
seen, uniq = set(), []
for j in jobs:
    k = (j[3], tuple(sorted(j[4].items())))
    if k not in seen:
        seen.add(k); uniq.append(j)

def check(job):
    i, match, kernel, file, d = job
    ro, old, eo = pre(OLD, file, d)
    rn, new, en = pre(NEW, file, d)
    return job, ro, rn, old == new, len(new), eo + en

bad = 0
result = {}
sizes = []
with ThreadPoolExecutor(8) as pool:
    for (i, match, kernel, file, d), ro, rn, same, n, err in pool.map(check, uniq):
        ok = ro == 0 and rn == 0 and same
        result[(file, tuple(sorted(d.items())))] = ok
        sizes.append(n)
        if not ok:
            bad += 1
            print("DIFF/ERROR", i, match, kernel, file, d, ro, rn, err)
per_entry = {}
for i, match, kernel, file, d in jobs:
    per_entry.setdefault(i, []).append(result[(file, tuple(sorted(d.items())))])
print(f"{len(uniq)} distinct builds ({len(jobs)} with repeats) of {len(per_entry)} measured entries preprocessed "
      f"({min(sizes)}-{max(sizes)} chars each); {bad} differ or fail")
print("entries whose every build is identical:", len([i for i, v in per_entry.items() if all(v)]), sorted(per_entry))
# the comparison can fail: the same build with DTYPE_BF16=1 differs between the sources
for file, d in [("pool2d.cl", {**dict(uniq[0][4]), "DTYPE_BF16": 1})]:
    pass
sanity = [(f, {**d, "DTYPE_BF16": 1}) for _, _, _, f, d in uniq if "DTYPE_INT8" not in d and "DTYPE_UINT8" not in d][:6]
diffs = [pre(OLD, f, d)[1] != pre(NEW, f, d)[1] for f, d in sanity]
print("sanity: bfloat16 variants of", len(sanity), "float builds differ between the sources:", diffs)
