#!/usr/bin/env python3
"""Compares two builds of `async-doca perf` on this machine, side by side.

    scripts/perf-ab.py OLD_BINARY NEW_BINARY [ROUNDS] [--json OUT] [--lat] [--tests LIST]

Runs the point-to-point latency tests (8 B, one and two processes) and the bandwidth tests
(8 B, 4 KiB, 64 KiB, two processes) in modes raw and async with each binary, alternating
(old, new, new, old, ...) so that a drift of the machine hits both alike (`--lat`: the
latency tests only, a round in about a minute; `--tests LIST`: only these latency tests,
comma-separated, e.g. `send_lat,write_imm_lat`). Prints, per test,
the medians over the rounds of raw p50, async p50, async - raw p50 (with every round's value)
and async/raw ops/s, and for the bandwidth tests the message rate. Note the load average it
prints: measure on a quiet machine (docs/cost.md).

Each perf run starts with the machine reference (`ref_ns`: the p50 round trip of a bare
atomic ping-pong between the tests' two CPUs, no DOCA). The `ref` column is its median over
the rounds of the row, and a line per build gives the median over all its runs: this VM has a
fast (~130 ns) and a slow (~400 ns) state, so compare builds at similar references. A binary
without the reference shows `-`.

To get the old binary: `git worktree add /tmp/old REV && cargo build --release
--manifest-path /tmp/old/Cargo.toml` (then /tmp/old/target/release/async-doca).

Build both with the same code alignment to compare a change, each in its own target
directory: `RUSTFLAGS="-Cllvm-args=-align-all-functions=6
-Cllvm-args=-align-all-nofallthru-blocks=5" CARGO_TARGET_DIR=/tmp/old-al cargo build
--release ...`. Without it, where functions and loops land moves a latency by up to ±10 ns
between builds whose instructions on the measured path are the same (docs/cost.md, "How to
measure").
"""
import json
import statistics
import subprocess
import sys

LAT = "write_lat,read_lat,send_lat,write_imm_lat,fadd_lat,cswap_lat,sync_add_wait"
BW = "write_bw,read_bw,send_bw"
RUNS = [
    ["--test", LAT, "--procs", "1,2", "--size", "8", "--iters", "100000"],
    ["--test", BW, "--procs", "2", "--size", "8,4096", "--iters", "200000"],
    ["--test", BW, "--procs", "2", "--size", "65536", "--iters", "5000"],
]


def load():
    return " ".join(open("/proc/loadavg").read().split()[:3])


def main():
    args = sys.argv[1:]
    out = None
    if "--json" in args:
        i = args.index("--json")
        out = args[i + 1]
        del args[i : i + 2]
    runs = RUNS
    if "--lat" in args:
        args.remove("--lat")
        runs = RUNS[:1]
    if "--tests" in args:
        i = args.index("--tests")
        runs = [["--test", args[i + 1]] + RUNS[0][2:]]
        del args[i : i + 2]
    if len(args) < 2:
        sys.exit(__doc__)
    bins = {"old": args[0], "new": args[1]}
    rounds = int(args[2]) if len(args) > 2 else 4
    rows = {}
    refs = {"old": [], "new": []}  # every perf run's machine reference, per build
    for r in range(rounds):
        for name in ["old", "new"] if r % 2 == 0 else ["new", "old"]:
            seen = len(refs[name])
            for run in runs:
                cmd = [bins[name], "perf", "--json", "--mode", "raw,async"] + run
                res = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
                if res.returncode != 0:
                    sys.exit(f"{' '.join(cmd)} failed:\n{res.stderr}")
                ref = None
                for line in res.stdout.splitlines():
                    if line.startswith("{"):
                        j = json.loads(line)
                        rows[(name, r, j["test"], j["size"], j["procs"], j["mode"])] = j
                        ref = j.get("ref_ns", ref)
                if ref is not None:
                    refs[name].append(ref)
            print(f"round {r} {name} done, load {load()}, ref {','.join(f'{x:.0f}' for x in refs[name][seen:]) or '-'} ns", file=sys.stderr, flush=True)
    if out:
        json.dump({"|".join(map(str, k)): v for k, v in rows.items()}, open(out, "w"))
    med = statistics.median
    print(f"{'test':14} {'size':>6} {'procs':>5} | {'build':5} {'ref':>5} {'raw p50':>8} {'async p50':>9} {'a-r':>7} {'a/r ops':>7}  rounds (a-r)  Mops/s async (raw)")
    for t, s, p in sorted({(k[2], k[3], k[4]) for k in rows}):
        for name in ["old", "new"]:
            v = [(rows[(name, r, t, s, p, "raw")], rows[(name, r, t, s, p, "async")]) for r in range(rounds)
                 if (name, r, t, s, p, "raw") in rows and (name, r, t, s, p, "async") in rows]
            if not v:
                continue
            raw, asy = med(w["p50_ns"] for w, _ in v), med(a["p50_ns"] for _, a in v)
            diff = [a["p50_ns"] - w["p50_ns"] for w, a in v]
            ops = med(a["ops_per_sec"] / w["ops_per_sec"] for w, a in v)
            rate = ""
            if t.endswith("_bw"):
                rate = f"  {med(a['ops_per_sec'] for _, a in v) / 1e6:.2f} ({med(w['ops_per_sec'] for w, _ in v) / 1e6:.2f})"
            ref = fmt_ref([w["ref_ns"] for w, _ in v if "ref_ns" in w])
            print(f"{t:14} {s:>6} {p:>5} | {name:5} {ref:>5} {raw:8.0f} {asy:9.0f} {med(diff):+7.0f} {ops:7.2f}  "
                  f"[{','.join(f'{d:+.0f}' for d in diff)}]{rate}")
    for name in ["old", "new"]:
        v = refs[name]
        span = f" [{min(v):.0f}-{max(v):.0f}] over {len(v)} runs" if v else ""
        print(f"machine reference {name}: median {fmt_ref(v)} ns{span} (bare atomic ping-pong p50)")
    print(f"load at the end: {load()}")


def fmt_ref(values):
    """The median of machine references (ns), or `-` when the binary measured none."""
    return f"{statistics.median(values):.0f}" if values else "-"


if __name__ == "__main__":
    main()
