#!/usr/bin/env python3
"""Summarizes scripts/bench-vs-llamacpp.sh's measurements: tables of medians with their min-max spread and the
ratio tessera / llama.cpp, written to OUT/summary.md and into docs/benchmarks.md between the vs-llamacpp markers.

Inputs: results.jsonl (one line per single-stream measurement, written by the shell script) and the serving
sweep indexes raw/llama-server-sweep.json and raw/tessera-sweep.json with the `tessera bench serve` reports
they name. A ratio's spread is the worst and best pairing of the two engines' runs (min/max, max/min)."""
import argparse
import datetime
import json
import os
import statistics
import sys

BEGIN = "<!-- vs-llamacpp:begin (written by scripts/bench-vs-llamacpp.sh; edits between the markers are lost) -->"
END = "<!-- vs-llamacpp:end -->"


def spread(values):
    return statistics.median(values), min(values), max(values)


def num(v):
    if v is None:
        return "-"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.3g}"


def cell(values):
    if not values:
        return "-"
    m, lo, hi = spread(values)
    return num(m) if len(values) == 1 else f"{num(m)} ({num(lo)}-{num(hi)})"


def ratio_cell(ours, theirs, higher_is_better=True):
    if not ours or not theirs:
        return "-"
    m = statistics.median(ours) / statistics.median(theirs)
    if len(ours) == 1 and len(theirs) == 1:
        return f"**{m:.2f}**"
    lo, hi = min(ours) / max(theirs), max(ours) / min(theirs)
    return f"**{m:.2f}** ({lo:.2f}-{hi:.2f})"


def single_stream_tables(rows):
    keys = []
    for r in rows:
        k = (r["shape"], r["preset"], r["threads"])
        if k not in keys:
            keys.append(k)
    # Forced kernel variants (EXTRA_ISAS): engines named tessera-<isa>, one more pair of columns each.
    extras = sorted({r["engine"] for r in rows if r["engine"].startswith("tessera-")})
    out = []
    # Rows without a depth are the default runs' (decode at depth 512, prefill of 512); DEPTHS and PREFILL lists add
    # one table per length.
    def depth(r):
        return int(r.get("depth", 512))
    tables = []
    for what in ("decode", "prefill"):
        for d in sorted({depth(r) for r in rows if r["what"] == what}) or [512]:
            tables.append((what, d))
    for what, d in tables:
        title = f"Decode tok/s at depth {d} (32 tokens)" if what == "decode" else f"Prefill of {d} tokens, tok/s"
        out.append(f"**{title}**: median (min-max) over runs; ratio = tessera / llama.cpp, higher is better for tessera\n")
        head = "| shape | preset | threads | llama.cpp | tessera | ratio |"
        head += "".join(f" {e} | {e} ratio |" for e in extras)
        out.append(head + " runs | tessera error |")
        out.append("|" + " --- |" * (8 + 2 * len(extras)))
        for shape, preset, threads in keys:
            sel = [r for r in rows if (r["shape"], r["preset"], r["threads"], r["what"], depth(r)) ==
                   (shape, preset, threads, what, d)]
            if not sel:
                continue
            lv = [r["tok_s"] for r in sel if r["engine"] == "llama.cpp" and "tok_s" in r]
            tv = [r["tok_s"] for r in sel if r["engine"] == "tessera" and "tok_s" in r]
            errs = sorted({r["error"] for r in sel if r["engine"].startswith("tessera") and "error" in r})
            runs = max(len([r for r in sel if r["engine"] == e]) for e in ("llama.cpp", "tessera"))
            err = errs[0].replace("|", "\\|") if errs else ""
            line = f"| {shape} | {preset} | {threads} | {cell(lv)} | {cell(tv)} | {ratio_cell(tv, lv)} |"
            for e in extras:
                ev = [r["tok_s"] for r in sel if r["engine"] == e and "tok_s" in r]
                line += f" {cell(ev)} | {ratio_cell(ev, lv)} |"
            out.append(line + f" {runs} | {err} |")
        out.append("")
    return out


def load_sweep(path):
    with open(path) as f:
        index = json.load(f)
    points = {}
    base = os.path.dirname(path)
    for p in index["points"]:
        reports = []
        for name in p["runs"]:
            with open(os.path.join(base, name)) as f:
                reports.append(json.load(f))
        points[int(p["value"])] = reports
    return points


def serving_table(serve_dir, desc):
    lpath = os.path.join(serve_dir, "llama-server-sweep.json")
    tpath = os.path.join(serve_dir, "tessera-sweep.json")
    if not (os.path.exists(lpath) and os.path.exists(tpath)):
        return []
    ls, ts = load_sweep(lpath), load_sweep(tpath)
    out = [f"**Serving** ({desc}): median (min-max) over runs; ratios are tessera / llama-server for throughput "
           "(higher is better) and llama-server / tessera for latency (higher is better for tessera)\n",
           "| concurrency | output tok/s llama-server | output tok/s tessera | ratio | TPOT p50 ms llama-server | "
           "TPOT p50 ms tessera | ratio | TTFT p50 ms llama-server | TTFT p50 ms tessera | ratio | failed requests, llama-server / tessera |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for c in sorted(set(ls) & set(ts)):
        def vals(reports, key):
            return [r[key] for r in reports if isinstance(r.get(key), (int, float))]
        lo, to = vals(ls[c], "output_throughput"), vals(ts[c], "output_throughput")
        lt, tt = vals(ls[c], "median_tpot_ms"), vals(ts[c], "median_tpot_ms")
        lf, tf = vals(ls[c], "median_ttft_ms"), vals(ts[c], "median_ttft_ms")
        failed = f'{sum(r.get("failed", 0) for r in ls[c])} / {sum(r.get("failed", 0) for r in ts[c])}'
        out.append(f"| {c} | {cell(lo)} | {cell(to)} | {ratio_cell(to, lo)} | {cell(lt)} | {cell(tt)} | "
                   f"{ratio_cell(lt, tt)} | {cell(lf)} | {cell(tf)} | {ratio_cell(lf, tf)} | {failed} |")
    out.append("")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--results", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--serve-dir", required=True)
    ap.add_argument("--concurrency", default="")
    ap.add_argument("--cpu", default="unknown")
    ap.add_argument("--nproc", default="?")
    ap.add_argument("--llama-commit", default="unknown")
    ap.add_argument("--llama-isa", default="unknown")
    ap.add_argument("--tessera-commit", default="unknown")
    ap.add_argument("--tessera-isa", default="")  # the forced kernel variant of the tessera columns, if any
    ap.add_argument("--command", default="scripts/bench-vs-llamacpp.sh")
    ap.add_argument("--serve-desc", default="")
    ap.add_argument("--benchmarks-md", default="")
    a = ap.parse_args()

    rows = []
    with open(a.results) as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
    loads = [r["load_1min"] for r in rows]
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    body = [f"Measured {when} on {a.cpu}, {a.nproc} vCPUs; tessera {a.tessera_commit}, llama.cpp {a.llama_commit} "
            f"(node-llama-cpp@3.21.1's bundle, built by scripts/llamacpp.sh with `GGML_NATIVE=OFF` and the ISA sets {a.llama_isa}); both with their defaults: Tessera `--backend auto` "
            + (f"(the cpu backend here, its kernel variant forced to {a.tessera_isa} by TESSERA_CPU_ISA, KV f16), "
               if a.tessera_isa else "(the cpu backend here, its kernel variant chosen from the CPU, KV f16), ")
            + "llama.cpp's (KV f16).",
            "",
            "```bash",
            a.command,
            "```",
            ""]
    if loads:
        body.append(f"1-minute load average before the single-stream runs: {min(loads):.1f} to {max(loads):.1f} "
                    "(an idle machine reads below 0.5; anything above 1 on 2 vCPUs means others shared the cores).")
        body.append("")
    body += single_stream_tables(rows)
    body += serving_table(a.serve_dir, a.serve_desc)
    if os.path.exists(os.path.join(a.out, "plots", "tpot-throughput.svg")):
        body.append("Plots (`tessera bench plot` of the serving sweeps): `plots/latency-throughput.svg`, "
                    "`plots/tpot-throughput.svg`, and per-engine TTFT/TPOT distributions in `plots/`.")
        body.append("")
    text = "\n".join(body)
    with open(os.path.join(a.out, "summary.md"), "w") as f:
        f.write("# Tessera vs llama.cpp (scripts/bench-vs-llamacpp.sh)\n\n" + text)

    if a.benchmarks_md:
        with open(a.benchmarks_md) as f:
            doc = f.read()
        section = BEGIN + "\n" + text.replace(
            "`plots/", "`" + os.path.relpath(os.path.join(a.out, "plots"), os.path.dirname(a.benchmarks_md)) + "/") + "\n" + END
        if BEGIN in doc and END in doc:
            doc = doc[:doc.index(BEGIN)] + section + doc[doc.index(END) + len(END):]
        else:
            doc = doc.rstrip("\n") + "\n\n## Tessera vs llama.cpp, same files, same machine\n\n" + section + "\n"
        with open(a.benchmarks_md, "w") as f:
            f.write(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
