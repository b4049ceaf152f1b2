"""What ``realrun compare`` prints and writes: the table, the notes, the files, and the verdict
last.

Text: the table and every note first (a failed write loses nothing measured), then the files
(``--out``: records; the figure unless ``--no-plots``), then the one line a reader wants
(``realrun.judge.bottom_line``). ``--json``: one object naming the files it is about to move into
place, each complete before it prints, with the verdict as ``verdict``.
"""

from __future__ import annotations

from pathlib import Path

from batchsim.core.files import Staging, dumps

from ..judge.bottom_line import verdict_dict, verdict_line
from ..judge.row import CompareReport
from .engines import all_rejected, load_line, memory_line, printable, stopped_code
from .run_setup import RunSetup, rejection_lines, stage_outputs, write_outputs

__all__ = ["report_compare"]


def _as_dict(x) -> dict | None:
    return x.as_dict() if x is not None else None


def _wall_line(seconds: float, bare: bool) -> str:
    line = f"wall time: {seconds:.0f} s"
    if bare:
        from ..reference.course import MEASURED, measured

        if MEASURED.is_file():
            ref = measured().get("wall_s") or []
            if ref:
                line += (
                    f" (the course machine took {', '.join(f'{s:.0f}' for s in ref)} s for this "
                    f"same run)"
                )
    return line


def report_compare(
    args,
    setup: RunSetup,
    lm,
    report: CompareReport,
    step_times,
    cal_info: dict,
    seeds: int,
    repeats: int,
    wall_s: float,
) -> int:
    """Print (and write) the report; the exit code: 130 after Ctrl-C, 2 when nothing was served,
    else 0."""
    from ..judge.compare import plot_compare

    title = f"{setup.name}: predicted (batchsim, calibrated) vs measured ({lm.name} on {lm.device})"
    stopped = [r.real.meta.get("stopped") for r in report.rows if r.real.meta.get("stopped")]
    results, outputs = {}, {}
    for r in report.rows:
        results[f"{r.label} (predicted)"] = r.sim
        results[f"{r.label} (measured)"] = r.real
        outputs[f"{r.label.split()[0]}-measured-"] = r.real
        outputs[f"{r.label.split()[0]}-predicted-"] = r.sim
    figure = (
        (lambda d: plot_compare(report, Path(d) / "predicted_vs_measured.png", title))
        if report.rows
        else None
    )
    if args.json:
        with Staging(setup.out) as staging:
            paths = stage_outputs(staging, outputs, args, figure)
            print(
                dumps(
                    _as_json(
                        args, setup, lm, report, step_times, cal_info, seeds, repeats, wall_s, paths
                    )
                )
            )
            staging.commit()
    else:
        _print_report(args, setup, lm, report, results, title, stopped, wall_s)
        paths = write_outputs(setup, outputs, args, figure)
        figs = [p for p in paths if p.suffix == ".png"]
        if figs:
            print("figure: " + ", ".join(str(f) for f in figs))
        if report.rows:
            print(verdict_line(report))
    return stopped_code(stopped) or all_rejected(
        {k: v for k, v in results.items() if k.endswith("(measured)")}
    )


def _as_json(
    args,
    setup: RunSetup,
    lm,
    report: CompareReport,
    step_times,
    cal_info: dict,
    seeds: int,
    repeats: int,
    wall_s: float,
    paths,
) -> dict:
    """The report as ``--json`` prints it: the configuration, each policy's row, the figures, the
    verdict."""
    from batchsim.core import rejections

    workload = setup.workload
    return {
        "scenario": setup.name,
        "config": {
            "workload": workload.description,
            "requests": len(workload),
            "engine": setup.engine,
            "kv_budget_tokens": setup.kv,
            "model": lm.describe(),
            "step_time": repr(step_times),
            "seeds": seeds,
            "repeats": repeats,
            "busy": args.busy,
            "step_noise": args.step_noise or "profiled",
            "level": report.level.as_dict() if report.level is not None else None,
        },
        "calibration": cal_info,
        "runs": [
            {
                "label": r.label,
                "policy": r.policy,
                **r.as_dict(),
                "decomposition": r.decomposition.as_dict() if r.decomposition else None,
                "meta": printable(r.real.meta),
                "rejections": {
                    "predicted": rejections.counts(r.sim.records.rejected),
                    "measured": rejections.counts(r.real.records.rejected),
                },
            }
            for r in report.rows
        ],
        "figures": [str(p) for p in paths if p.suffix == ".png"],
        "verdict": verdict_dict(report) if report.rows else None,
        "run_spread": report.spread.as_dict() if report.spread is not None else None,
        # the move the intervals made before the runs hold (None: one run spread's share), this
        # compare's own reading (mean ln of its runs' levels), and what the next compare on this
        # machine should be given (--level-move SD:DF)
        "level_move": report.move.as_dict() if report.move is not None else None,
        "level_move_here": None if report.move_here is None else round(report.move_here, 4),
        "level_move_next": _as_dict(report.move_next),
        "metric_spread": {
            k: (None if v is None else {"sd": round(v[0], 4), "df": v[1]})
            for k, v in report.metric_sd.items()
        },
        "wall_s": round(wall_s, 1),
        "notes": setup.notes + report.notes,
    }


def _print_report(
    args,
    setup: RunSetup,
    lm,
    report: CompareReport,
    results: dict,
    title: str,
    stopped: list,
    wall_s: float,
) -> None:
    """The report as a table and its notes, printed before any file is written."""
    from ..judge.compare import format_compare

    explain = bool(getattr(args, "explain", False))
    print(title)
    print(f"model: {lm.describe()}")
    print(f"workload: {len(setup.workload)} requests, {setup.workload.description}")
    print(format_compare(report, explain=explain))
    for line in rejection_lines(results):
        print(line)
    notes = setup.notes + report.notes
    if explain:
        print()
        print("error = (predicted - measured) / measured")
        for n in notes:
            print(n)
        if report.rows:
            print(memory_line(report.rows[-1].real.meta))
    else:
        # Warnings and where the calibration went stay on the one screen; the rest is --explain's.
        kept = [n for n in notes if n.startswith(("warning", "calibration (", "interrupted"))]
        for n in kept:
            print(n)
        if len(notes) > len(kept):
            print(
                f"({len(notes) - len(kept)} more notes on the profile, the canaries and the level: "
                f"--explain shows them "
                "with every metric and where each error came from; --json keeps everything)"
            )
    print(load_line())
    for s in stopped:
        print(f"note: {s}")
    print(_wall_line(wall_s, bool(getattr(args, "bare", None))))
