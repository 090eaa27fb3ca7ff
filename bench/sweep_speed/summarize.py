"""Summary of bench/sweep_speed/run: wall-time ratios of alternating runs and per-size times.

Reads OUT/walls ("round tool seconds"), OUT/sweep.R.json (ncclprobe's records), OUT/ref.R
(imb_schedule: "size repetitions time_us" lines) and OUT/imb.R (IMB-MPI1's table, if run)."""
import json
import statistics
import sys
from collections import defaultdict

out, rounds = sys.argv[1], int(sys.argv[2])
walls = defaultdict(dict)
for line in open(f"{out}/walls"):
    r, tool, s = line.split()
    walls[tool][int(r)] = float(s)


def ratio_lines(tool, label):
    if tool not in walls:
        return
    pairs = [(walls["sweep"][r], walls[tool][r]) for r in sorted(walls[tool]) if r in walls["sweep"]]
    ratios = [s / t for s, t in pairs]
    print(f"sweep / {label}: per round " + " ".join(f"{x:.2f}" for x in ratios))
    print(
        f"  median ratio {statistics.median(ratios):.2f}; best sweep {min(s for s, _ in pairs):.2f} s"
        f" / best {label} {min(t for _, t in pairs):.2f} s = "
        f"{min(s for s, _ in pairs) / min(t for _, t in pairs):.2f}"
    )


print("round  " + "  ".join(f"{t:>10}" for t in walls))
for r in range(1, rounds + 1):
    print(f"{r:>5}  " + "  ".join(f"{walls[t].get(r, float('nan')):>9.2f}s" for t in walls))
ratio_lines("reference", "IMB schedule (bare loop)")
ratio_lines("imb", "IMB-MPI1")

# Per size: the sweep's median of medians over rounds (both placements), the reference's.
sweep_t = defaultdict(list)
half = defaultdict(list)
reasons = defaultdict(lambda: defaultdict(int))
points = within = reported = 0
for r in range(1, rounds + 1):
    try:
        record = json.load(open(f"{out}/sweep.{r}.json"))
    except (OSError, ValueError):
        continue
    for p in record["points"]:
        key = (p["size_bytes"], p["placement"])
        sweep_t[key].append(p["time_s"] * 1e6)
        hw = p["stats"]["ci_rel_half_width"]
        half[key].append(hw)
        reasons[key][p["stop_reason"]] += 1
        points += 1
        reported += p["stats"]["ci_level"] >= 0.95 and hw == hw
        within += hw <= 0.03
ref_t = defaultdict(list)
reps = {}
for r in range(1, rounds + 1):
    for line in open(f"{out}/ref.{r}"):
        f = line.split()
        if f[0] != "wall_s":
            ref_t[int(f[0])].append(float(f[2]))
            reps[int(f[0])] = int(f[1])
imb_t = defaultdict(list)
for r in range(1, rounds + 1):
    try:
        for line in open(f"{out}/imb.{r}"):
            f = line.split()
            if len(f) == 5 and f[0].isdigit() and f[1].isdigit():
                imb_t[int(f[0])].append(float(f[4]))
    except OSError:
        pass

print()
print(f"{'size_bytes':>11} {'ref_us':>11} {'reps':>5} {'oop_us':>11} {'oop_ci':>7} {'inp_us':>11} {'inp_ci':>7}"
      f" {'oop/ref':>7} {'imb_us':>10}  stop reasons")
for size in sorted({k[0] for k in sweep_t} | set(ref_t)):
    o, i = (size, "out-of-place"), (size, "in-place")
    med = lambda v: statistics.median(v) if v else float("nan")
    ref = med(ref_t.get(size, []))
    why = ",".join(f"{k}:{v}" for k, v in sorted({**reasons[o]}.items()))
    print(
        f"{size:>11} {ref:>11.3f} {reps.get(size, 0):>5} {med(sweep_t[o]):>11.3f} {100 * max(half[o] or [0]):>6.1f}%"
        f" {med(sweep_t[i]):>11.3f} {100 * max(half[i] or [0]):>6.1f}% {med(sweep_t[o]) / ref:>7.3f}"
        f" {med(imb_t.get(size, [])):>10.2f}  {why}"
    )
print()
print(f"points within +-3%: {within} of {points} ({100 * within / max(points, 1):.1f}%), "
      f"interval reported at >= 95%: {reported} of {points} (ci columns: widest over rounds)")
