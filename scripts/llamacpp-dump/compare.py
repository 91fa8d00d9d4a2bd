#!/usr/bin/env python3
"""Compares Tessera's activations with llama.cpp's on the same file and prompt, point by point.

LCDIR is written by scripts/llamacpp-dump/run.sh (llama.cpp's graph tensors, NNN_<name>.bin: four int64
dimensions, then f32 data); TSDIR by `tessera serve` with TESSERA_DUMP_ACTIVATIONS=TSDIR (<point>-<layer>.<k>.f32:
int64 rows and row length, then f32 rows; k 0 is the prompt's step). For each point of each layer (llama.cpp names
a tensor after the last operation that wrote it: the last file of a name is taken, e.g. Qcur after the rotation),
prints the relative L2 difference ||tessera - llama.cpp|| / ||llama.cpp|| of the last row, its largest absolute
difference, and over all the rows both have (llama.cpp computes only the last row after the last layer's
attention). Standard library only.

usage: compare.py LCDIR TSDIR [--rows] [--max REL]
  --rows: the difference of every row, first to last
  --max REL: exit with status 1 if any point's last row differs by more than REL (relative L2), for tests
"""
import array
import math
import os
import re
import struct
import sys

POINTS = ["attn_norm", "Qcur", "Kcur", "Vcur", "kqv_out", "ffn_inp", "ffn_norm", "ffn_out", "l_out"]


def load_llamacpp(lcdir, name, files):
    hits = [f for f in files if re.fullmatch(r"\d+_" + re.escape(name) + r"\.bin", f)]
    if not hits:
        return None
    data = open(os.path.join(lcdir, hits[-1]), "rb").read()
    values = array.array("f")
    values.frombytes(data[32:])
    return values


def load_tessera(path):
    if not os.path.exists(path):
        return None
    data = open(path, "rb").read()
    rows, cols = struct.unpack("<2q", data[:16])
    values = array.array("f")
    values.frombytes(data[16:])
    return rows, cols, values


def rel(a, b):
    den = sum(y * y for y in b)
    num = sum((x - y) ** 2 for x, y in zip(a, b))
    return math.sqrt(num / den) if den > 0 else float("nan"), max((abs(x - y) for x, y in zip(a, b)), default=0.0)


def compare(label, t, lc, per_row):
    """Prints one point's differences; returns the last row's relative difference."""
    rows, cols, tv = t
    lrows = len(lc) // cols
    n = min(rows, lrows)
    last, biggest = rel(tv[-cols:], lc[-cols:])
    both, _ = rel(tv[(rows - n) * cols:], lc[(lrows - n) * cols:])
    norm = math.sqrt(sum(y * y for y in lc[-cols:]))
    print(f"{label:<14} last row {last:.2e} (max |diff| {biggest:.2e}, |llama.cpp| {norm:.3g}); {n} rows {both:.2e}")
    if per_row:
        diffs = [rel(tv[(rows - n + r) * cols:(rows - n + r + 1) * cols], lc[(lrows - n + r) * cols:(lrows - n + r + 1) * cols])[0]
                 for r in range(n)]
        print("               rows: " + " ".join(f"{d:.1e}" for d in diffs))
    return last


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    lcdir, tsdir = sys.argv[1], sys.argv[2]
    per_row = "--rows" in sys.argv[3:]
    bound = float(sys.argv[sys.argv.index("--max") + 1]) if "--max" in sys.argv[3:] else None
    files = sorted(os.listdir(lcdir))
    worst, points = 0.0, 0
    layer = 0
    while os.path.exists(f"{tsdir}/attn_norm-{layer}.0.f32"):
        for p in POINTS:
            t = load_tessera(f"{tsdir}/{p}-{layer}.0.f32")
            lc = load_llamacpp(lcdir, f"{p}-{layer}", files)
            if t is not None and lc is not None:
                d = compare(f"{p}-{layer}", t, lc, per_row)
                worst, points = max(worst, d) if d == d else float("inf"), points + 1
        layer += 1
    if layer == 0:
        sys.exit(f"no Tessera dump in {tsdir} (run tessera serve with TESSERA_DUMP_ACTIVATIONS={tsdir})")
    t = load_tessera(f"{tsdir}/result_norm-out.0.f32")
    lc = load_llamacpp(lcdir, "result_norm", files)
    if t is not None and lc is not None:
        d = compare("result_norm", t, lc, per_row)
        worst, points = max(worst, d) if d == d else float("inf"), points + 1
    print(f"{points} points compared, largest last-row difference {worst:.2e}")
    if bound is not None and (points == 0 or worst > bound):
        sys.exit(f"activations differ by more than {bound:g} (or nothing was compared)")


if __name__ == "__main__":
    main()
