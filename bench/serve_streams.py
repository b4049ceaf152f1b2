"""How many concurrent streams does `realrun serve` hold before the time to first token passes 1 s?

Starts the server (default model, this machine's CPU, the policy flags given after ``--``),
then, for N = 1, 2, 4, ... concurrent clients (``realrun load --max-concurrency N``, every
request ready at once, so N are always in flight), measures TTFT, TPOT and throughput.
Each N is run ``--repeats`` times, the N interleaved round by round, and the spread is
printed beside the median. A host yardstick (a fixed pure-Python loop) is printed first,
since hosts differ (one ran pure Python 3x slower than another).

    python bench/serve_streams.py                         # continuous, the server's defaults
    python bench/serve_streams.py -- --max-seqs 256       # a batch that holds every stream
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from host import yardstick  # noqa: E402 - bench/ is the script's own folder
from serving import served  # noqa: E402

from batchsim.core.arrivals import Constant  # noqa: E402
from batchsim.core.lengths import Fixed  # noqa: E402
from batchsim.core.workload import make_workload  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    server_flags = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", default="1,2,4,8,16,32,64,128", help="concurrent clients to try")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--output", type=int, default=64)
    ap.add_argument("--per-stream", type=int, default=3, help="requests per client in each run")
    args = ap.parse_args(argv)
    from realrun.classroom.load import run_load

    print(f"host yardstick: 10M-iteration Python loop {yardstick():.2f} s")
    levels = [int(x) for x in args.streams.split(",")]
    import tempfile

    with tempfile.TemporaryDirectory() as tmp, served(*server_flags, tmp=Path(tmp)) as srv:
        print(
            f"server: {srv.url} {' '.join(server_flags) or '(defaults)'}; prompt {args.prompt}, "
            f"output {args.output}"
        )
        rows: dict[int, list[dict]] = {n: [] for n in levels}
        for r in range(args.repeats):
            for n in levels if r % 2 == 0 else levels[::-1]:  # interleaved, alternating order
                k = max(8, n * args.per_stream)
                wl = make_workload(
                    Constant(1e6), Fixed(args.prompt), Fixed(args.output), n=k, seed=r
                )
                rep = run_load(srv.url, wl, max_concurrency=n)
                rows[n].append(rep.summary())
        print(
            f"{'streams':>7} {'TTFT p50 ms':>16} {'TTFT p90 ms':>12} {'TPOT p50 ms':>16} "
            f"{'out tok/s':>16}  failed"
        )
        first_over = None
        for n in levels:
            s = rows[n]

            def spread(key: str, s=s) -> str:
                v = [x[key] for x in s if x.get(key) is not None]
                return (
                    f"{statistics.median(v):7.0f} ±{(max(v) - min(v)) / 2:5.0f}" if v else "      -"
                )

            p50 = statistics.median(x["median_ttft_ms"] for x in s)
            if first_over is None and p50 > 1000:
                first_over = n
            print(
                f"{n:>7} {spread('median_ttft_ms'):>16} "
                f"{statistics.median(x['p90_ttft_ms'] for x in s):>12.0f} "
                f"{spread('median_tpot_ms'):>16} {spread('output_throughput'):>16}  "
                f"{sum(x['failed'] for x in s)}"
            )
        print(
            "median TTFT passed 1 s first at",
            f"{first_over} streams" if first_over else "none of these levels",
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
