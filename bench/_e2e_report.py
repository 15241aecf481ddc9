"""bench/e2e.py's verdicts and its section of BENCHMARKS.md, from the runs of every seed.

``_summary``: means over the seeds (the first-hop seconds: medians) and the
ratios the targets judge; ``_table``: every seed's figure and their mean, a row
per method; ``_report``: the section itself.
"""

from __future__ import annotations

import statistics

from bench._report import command, machine, write_section

#: (method, its best-metric field) in the runs of a seed
METHODS = (("hoptune", "best"), ("hoptune_fused", "best"), ("optuna", "best"),
           ("random", "best"), ("nightly", "mean_best"), ("optuna_nightly", "mean_best"))


def _summary(runs: list[dict]) -> dict:
    """Means over the seeds (first-hop seconds: medians) and the ratios the targets judge."""
    mean = statistics.fmean
    f: dict = {}
    for method, best in METHODS:
        f[method] = {"wall_s": round(mean(r[method]["wall_s"] for r in runs), 2),
                     "epochs": round(mean(r[method]["epochs"] for r in runs), 1),
                     best: round(mean(r[method][best] for r in runs), 4)}
    f["hoptune_fused"]["fuse"] = runs[0]["hoptune_fused"]["fuse"]
    for k in ("passes", "cohort_passes", "joined_passes"):  # totals over the seeds
        f["hoptune_fused"][k] = sum(r["hoptune_fused"][k] for r in runs)
    for mode in ("warm", "cold"):
        f[f"first_hop_{mode}_s"] = round(statistics.median(r[f"first_hop_{mode}_s"]
                                                           for r in runs), 3)
    f["study_vs_optuna"] = round(f["hoptune"]["wall_s"] / f["optuna"]["wall_s"], 3)
    f["fused_study_vs_optuna"] = round(f["hoptune_fused"]["wall_s"] / f["optuna"]["wall_s"],
                                       3)
    f["regions10_vs_optuna"] = round(f["nightly"]["wall_s"] / f["optuna_nightly"]["wall_s"],
                                     3)
    f["best_hoptune"], f["best_optuna"] = f["hoptune"]["best"], f["optuna"]["best"]
    f["best_random"] = f["random"]["best"]
    f["best_hoptune_fused"] = f["hoptune_fused"]["best"]
    f["mean_best_nightly_hoptune"] = f["nightly"]["mean_best"]
    f["mean_best_nightly_optuna"] = f["optuna_nightly"]["mean_best"]
    return f


def _row(parts: dict) -> str:
    return " | ".join(f"{v:.2f}" for v in parts.values())


def _verdict(ok: bool) -> str:
    return "met" if ok else "missed"


LABELS = {"hoptune": "`hoptune tune`, warm workers",
          "hoptune_fused": "`hoptune tune`, warm workers, `fuse = {fuse}`",
          "optuna": "Optuna TPE + successive halving",
          "random": "random search",
          "nightly": "`hoptune nightly`, {regions} regions at once",
          "optuna_nightly": "Optuna, {regions} regions in turn"}


def _table(f: dict) -> str:
    """A row per method: each seed's figure, then their mean."""
    rows = []
    for method, best in METHODS:
        label = LABELS[method].format(fuse=f["hoptune_fused"]["fuse"], regions=f["regions"])
        runs = [r[method] for r in f["runs"]]
        walls = ", ".join(f"{r['wall_s']:.2f}" for r in runs)
        epochs = ", ".join(str(r["epochs"]) for r in runs)
        bests = ", ".join(f"{r[best]:.4f}" for r in runs)
        m = f[method]
        rows.append(f"| {label} | {walls} (**{m['wall_s']:.2f}**) | {epochs} "
                    f"(**{m['epochs']:g}**) | {bests} (**{m[best]:.4f}**) |")
    return "\n".join(rows)


def _report(f: dict) -> None:
    o, n, on = f["optuna"], f["nightly"], f["optuna_nightly"]
    hf = f["hoptune_fused"]
    parts = "\n".join(
        f"| {r['seed']} | {mode} | {_row(r[f'first_hop_{key}_parts'])} | "
        f"{r[f'first_hop_{key}_s']:.2f} |"
        for r in f["runs"] for key, mode in (("warm", "warm workers"),
                                             ("cold", "`--local-workers 2` from cold")))
    write_section("e2e", f"""
## End to end against Optuna and random search (`bench/e2e.py`)

Machine: {machine()}. Command: `{command()}`.
Load average (1, 5, 15 min) before / after: {f['load_before']} / {f['load_after']}.
Whole bench: {f['seconds']:.0f} s.
Synthetic ratings regions of {f['rows']:,} rows, the rating model, the same space
(lr, embedding_dim, reg) and budget ({f['trials']} trials of up to {f['epochs']} epochs) for
every method. hoptune: 2 shards per region, 2 local workers (`hoptune up`), parallel 4,
asynchronous successive halving (reduction factor 3). Optuna: TPE and its
successive-halving pruner (reduction factor 3, epochs reported from 1 so that its rungs
fall after the same epochs as hoptune's), in one process on the whole training set;
random search: Optuna's random sampler, no pruning, in one process. The in-process runs
include their own ingest of the data.

Every method ran with {f['seeds']} seeds (0 to {f['seeds'] - 1}: hoptune's `seed`
setting, each run in a fresh home; Optuna's sampler seed and its trials' model seeds; in the
10-region runs each region has its own seed, the same for both tuners: with one seed for all
10, both start every region with the same trials and a night's mean is nearer one draw than
ten). One seed's best metric is one draw, and the draws differ between seeds by more than
the tuners differ, so each cell gives every seed's figure in order and, in bold, their mean;
the verdicts below compare the means.

| | wall (s) | epochs trained | best final validation RMSE (mean over regions) |
| --- | --- | --- | --- |
{_table(f)}

Seconds to the first hop, by part (command start to study recorded: the driver's start,
imports, ingest; to the trials recorded: the proposals (with workers up, the
`tune_step` message, its pickup and the proposals; from cold, the command's own proposals
while its workers import); to the hop queued; to the hop claimed on a worker):

| seed | | driver to study | tune_step | dispatch | hop start | first hop |
| --- | --- | ---: | ---: | ---: | ---: | ---: |
{parts}

First hop starts **{f['first_hop_warm_s']:.2f} s** (median of the seeds) after
`hoptune tune` with workers up (target at most 2 s: {_verdict(f['first_hop_warm_s'] <= 2)})
and **{f['first_hop_cold_s']:.2f} s** after `hoptune tune --local-workers 2` from cold
(target at most 8 s: {_verdict(f['first_hop_cold_s'] <= 8)}).
One region's study over Optuna's wall time (means): **{f['study_vs_optuna']:.2f}x** (target
at most 1.5x: {_verdict(f['study_vs_optuna'] <= 1.5)}).
With `fuse = {hf['fuse']}` (trials hop in cohorts, one fused model per hop):
**{f['fused_study_vs_optuna']:.2f}x** Optuna's wall time at a mean best final RMSE of
{hf['best']:.4f} against Optuna's {o['best']:.4f} (target below 1x at an equal or better
metric: {_verdict(f['fused_study_vs_optuna'] < 1 and hf['best'] <= o['best'])}). Its
{hf['passes']} shard passes over the seeds: {hf['cohort_passes']} trained a cohort, and in
{hf['joined_passes']} of those a trial that had joined at an epoch boundary trained beside
members an epoch or more ahead of it.
{f['regions']} regions at once over Optuna one after another (means):
**{f['regions10_vs_optuna']:.2f}x** at a mean best of {n['mean_best']:.4f} against
{on['mean_best']:.4f} (target below 1 with an equal or better mean best metric:
{_verdict(f['regions10_vs_optuna'] < 1 and n['mean_best'] <= on['mean_best'])}).
""")
