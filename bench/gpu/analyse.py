"""Summarise bench/gpu_check.sh's records: what persyst-nvml measured in each phase of
bench/gpu/workload.py, against what the workload did (and nvidia-smi's own readings).

  python3 bench/gpu/analyse.py DIR      (DIR holds reads.txt, workload.txt, smi.csv)
"""
import sys


def reads(path):
    """[(t, {key: value})] for GPU 0, from the helper's "gpu 0 t=... k=v" lines."""
    out = []
    for line in open(path):
        f = line.split()
        if len(f) < 3 or f[0] != "gpu" or f[1] != "0":
            continue
        kv = dict(x.split("=", 1) for x in f[2:] if "=" in x)
        out.append((float(kv["t"]), kv))
    return out


def num(kv, k):
    v = kv.get(k)
    if v is None or v.startswith("!"):
        return None
    return float(v)


def at(rs, t):
    """The read nearest t."""
    return min(rs, key=lambda r: abs(r[0] - t))


def main(d):
    rs = reads(f"{d}/reads.txt")
    phases = []
    for line in open(f"{d}/workload.txt"):
        f = line.split()
        if f and f[0] == "phase":
            phases.append((f[1], float(f[2]), float(f[3])))
    print(f"{len(rs)} reads of GPU 0")
    print(f"{'phase':10} {'secs':>5} {'util%':>6} {'gpm%':>6} {'sm%':>6} {'occ%':>6} {'tensor%':>7} {'dram%':>6} {'memGiB':>7} {'peakGiB':>7} {'E/t W':>7} {'power W':>7}")
    for name, a, b in phases:
        # the reads inside the phase, leaving 1 s at each end for the sampler's period
        inside = [r for r in rs if a + 1 <= r[0] <= b - 0.5]
        if len(inside) < 2:
            print(f"{name:10} too few reads")
            continue
        r0, r1 = inside[0], inside[-1]
        dt = r1[0] - r0[0]

        def share(k, cov):
            x0, x1, c0, c1 = num(r0[1], k), num(r1[1], k), num(r0[1], cov), num(r1[1], cov)
            if None in (x0, x1, c0, c1) or c1 <= c0:
                return "-"
            return f"{100 * (x1 - x0) / (c1 - c0):.1f}"

        e0, e1 = num(r0[1], "energy"), num(r1[1], "energy")
        ew = f"{(e1 - e0) / 1000 / dt:.1f}" if None not in (e0, e1) else "-"
        pw = [num(r[1], "power") for r in inside if num(r[1], "power") is not None]
        pm = f"{sum(pw) / len(pw) / 1000:.1f}" if pw else "-"
        mem = num(r1[1], "mem")
        peak = max((num(r[1], "mem_peak") or 0) for r in inside)
        print(f"{name:10} {dt:5.1f} {share('busy', 'util_s'):>6} {share('gpm_busy', 'gpm_s'):>6} {share('sm', 'gpm_s'):>6}"
              f" {share('occupancy', 'gpm_s'):>6} {share('tensor', 'gpm_s'):>7} {share('dram', 'gpm_s'):>6}"
              f" {(mem or 0) / 2**30:7.2f} {peak / 2**30:7.2f} {ew:>7} {pm:>7}")
    try:
        rows = [l.split(",") for l in open(f"{d}/smi.csv") if l.strip()]
        print(f"nvidia-smi: {len(rows)} readings (utilization.gpu, memory.used, power.draw per second) in smi.csv")
    except OSError:
        pass


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
