#!/usr/bin/env python3
"""Instructions per operation of `examples/op_cost`, by function, under callgrind.

Runs `op_cost KIND N` twice under callgrind (N = LOW and HIGH operations) and divides the
difference of each function's own instructions by HIGH - LOW: what one more operation costs,
without the program's setup. Deterministic: the counts are the same on a quiet or a loaded
machine, so two builds compare without alternating them (the wall clock does not; see
docs/cost.md, "How to measure").

usage: scripts/op-cost.py [--bin PATH] [--low N] [--high N] [--top K] [--lines REGEX] KIND...

  KIND       op_cost's kinds: write, read, fadd, lane, lanes, window, pipeline, sync, ...
  --bin      an op_cost binary to measure (default: build this checkout's, release)
  --low/high the two operation counts (default 20000 and 120000)
  --top      how many functions to list per kind (default 12; 0: only the totals)
  --lines    also list, for the functions whose name matches REGEX, their instructions by
             source line, inlined code at its own file and line (where a function's cost goes)

Each function is labelled `provider` (doca-soft, the DOCA C API), `caller` (op_cost's own
loop, where the crate's inlined construction and polling of a future land), `libc` (memcpy,
malloc: a write's payload is copied by the provider's memcpy) or `runtime`.
needs: valgrind
"""

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build():
    subprocess.run(["cargo", "build", "--release", "--example", "op_cost"], cwd=ROOT, check=True)
    return os.path.join(ROOT, "target", "release", "examples", "op_cost")


def profile(binary, kind, n, out):
    subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", binary, kind, str(n)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
    )


def parse(path):
    """Self instructions of each function (name -> count, and name -> its file), of each
    inlined source line ((function, file, line) -> count), and the program's total, from a
    callgrind output file (compressed names, relative positions; the cost lines after a
    `calls=` line are a call's inclusive cost and are skipped)."""
    files, fns = {}, {}
    by_fn = collections.Counter()
    fn_file = {}
    by_line = collections.Counter()
    total = None
    fn = fl = cur = None
    last = 0
    after_call = False

    def name(table, value):
        m = re.match(r"\((\d+)\)(?: (.*))?$", value)
        if not m:
            return value
        if m.group(2) is not None:
            table[m.group(1)] = m.group(2)
        return table.get(m.group(1), "?")

    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            c = line[0]
            if line.startswith("totals:"):
                total = int(line.split()[1])
                continue
            if c.isalpha():
                key, _, value = line.partition("=")
                if key == "fl":
                    fl = cur = name(files, value)
                elif key in ("fi", "fe"):
                    cur = name(files, value)
                elif key == "fn":
                    fn = name(fns, value)
                    cur = fl
                    fn_file.setdefault(fn, fl)
                elif key in ("cfl", "cfi"):
                    name(files, value)
                elif key == "cfn":
                    name(fns, value)
                elif key == "calls":
                    after_call = True
                continue
            if c not in "+-*0123456789":
                continue
            parts = line.split()
            p = parts[0]
            if p == "*":
                pos = last
            elif p[0] in "+-":
                pos = last + int(p)
            else:
                pos = int(p)
            last = pos
            if after_call:
                after_call = False
                continue
            if fn is not None and len(parts) > 1:
                n = int(parts[1])
                by_fn[fn] += n
                by_line[(fn, cur, pos)] += n
    return by_fn, fn_file, by_line, total


def label(fn, path):
    path = path or ""
    if "doca-soft/" in path or fn.startswith("doca_"):
        return "provider"
    if "examples/op_cost.rs" in path or fn.startswith("op_cost::"):
        return "caller"
    if "sysdeps/" in path or "glibc" in path or fn.startswith(("__mem", "_int_", "malloc", "free")):
        return "libc"
    return "runtime"


def source_line(path, line, cache={}):
    if path not in cache:
        try:
            with open(path) as f:
                cache[path] = f.read().split("\n")
        except OSError:
            cache[path] = []
    text = cache[path]
    return text[line - 1].strip() if 0 < line <= len(text) else ""


def short(path):
    path = path or "?"
    if path.startswith(ROOT + "/"):
        return path[len(ROOT) + 1 :]
    return path.split("/library/")[-1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin")
    ap.add_argument("--low", type=int, default=20000)
    ap.add_argument("--high", type=int, default=120000)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--lines")
    ap.add_argument("kinds", nargs="+")
    a = ap.parse_args()
    if a.high <= a.low:
        sys.exit("op-cost: --high must be above --low")
    if not shutil.which("valgrind"):
        sys.exit("op-cost: needs valgrind (e.g. apt-get install valgrind)")
    binary = a.bin or build()
    ops = float(a.high - a.low)
    with tempfile.TemporaryDirectory(prefix="op-cost.") as tmp:
        for kind in a.kinds:
            runs = []
            for n in (a.low, a.high):
                out = os.path.join(tmp, f"{kind}.{n}")
                profile(binary, kind, n, out)
                runs.append(parse(out))
            (lo, files, lo_lines, lo_total), (hi, files_hi, hi_lines, hi_total) = runs
            files = {**files, **files_hi}
            per = {f: (hi[f] - lo[f]) / ops for f in set(lo) | set(hi)}
            total = (hi_total - lo_total) / ops
            if abs(sum(per.values()) - total) > 1:
                print(f"op-cost: {kind}: the functions add up to {sum(per.values()):.0f}, not {total:.0f}", file=sys.stderr)
            totals = collections.Counter()
            for f, v in per.items():
                totals[label(f, files.get(f))] += v
            print(
                f"{kind}: {total:.0f} instructions per operation "
                f"(runtime {totals['runtime']:.0f}, caller {totals['caller']:.0f}, provider {totals['provider']:.0f}"
                f", libc {totals['libc']:.0f})"
            )
            for f, v in sorted(per.items(), key=lambda kv: -abs(kv[1]))[: a.top]:
                if abs(v) >= 1:
                    print(f"  {v:7.0f}  {label(f, files.get(f)):8}  {f[:140]}")
            if a.lines:
                lines = collections.Counter()
                for k in set(lo_lines) | set(hi_lines):
                    if re.search(a.lines, k[0]):
                        lines[k[1:]] += (hi_lines[k] - lo_lines[k]) / ops
                print(f"  by source line, functions matching {a.lines!r}: {sum(lines.values()):.0f}")
                for (path, line), v in sorted(lines.items(), key=lambda kv: -abs(kv[1]))[: max(a.top, 20)]:
                    if abs(v) >= 1:
                        print(f"  {v:7.1f}  {short(path)}:{line}  {source_line(path, line)[:90]}")


if __name__ == "__main__":
    main()
