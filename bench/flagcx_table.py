"""busbw per size of runs a, b, c side by side, from OUT/<x>_summary.json (bench/flagcx_compare.sh).
Usage: bench/flagcx_table.py OUT_DIR"""
import json
import os
import re
import sys

LABELS = {"a": "NCCL (torch)", "b": "FlagCX (torch)", "c": "FlagCX perf"}
UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "B": 1}


def size_bytes(label):
    m = re.fullmatch(r"(\d+)([KMGB]?)", label)
    return int(m.group(1)) * UNITS.get(m.group(2) or "B", 1) if m else -1


def load(out, name):
    path = os.path.join(out, f"{name}_summary.json")
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        return {}, f"no summary ({exc.__class__.__name__})"
    rows, status = {}, []
    for case in data.get("cases", []):
        status.append(f"{case.get('name')}: {case.get('status')}")
        for rnd in case.get("rounds", []):
            fail = (rnd.get("failure") or {}).get("reason")
            if fail:
                status.append(f"round {rnd.get('round')} {rnd.get('status')}: {str(fail)[:200]}")
            for metric, m in (rnd.get("metrics") or {}).items():
                mm = re.fullmatch(r"busbw_(all_reduce|[a-z_]+?)_(\d+[KMGB]?)", metric)
                if mm and isinstance(m, dict) and isinstance(m.get("value"), (int, float)):
                    rows[(mm.group(1), mm.group(2))] = m["value"]
    return rows, "; ".join(status) or data.get("status", "?")


def main():
    out = sys.argv[1]
    runs = {k: load(out, k) for k in LABELS}
    for k, (_, st) in runs.items():
        print(f"{k} {LABELS[k]}: {st}")
    keys = sorted({key for rows, _ in runs.values() for key in rows}, key=lambda t: (t[0], size_bytes(t[1])))
    print(f"\n{'op':<11} {'size':>6} " + " ".join(f"{LABELS[k]:>15}" for k in LABELS) + "   busbw GB/s")
    for op, size in keys:
        cells = []
        for k in LABELS:
            v = runs[k][0].get((op, size))
            cells.append(f"{v:15.2f}" if v is not None else f"{'-':>15}")
        print(f"{op:<11} {size:>6} " + " ".join(cells))
    smi = os.path.join(out, "smi.csv")
    if os.path.exists(smi):
        print("\nnvidia-smi snapshots (smi.csv):")
        with open(smi) as f:
            for line in f:
                print("  " + line.rstrip())


if __name__ == "__main__":
    main()
