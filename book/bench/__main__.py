"""python -m book.bench [--only CHAPTER_OR_NAME ...]: run benchmarks on a GPU and write results files."""

from __future__ import annotations

import argparse
import sys
import time

from book import results, telemetry
from book.bench import ALL
from book.bench.registry import BenchmarkSkipped
from book.provenance import collect


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m book.bench", description=__doc__)
    parser.add_argument("--only", nargs="+", metavar="NAME", help="chapters (ch02) or benchmark names")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    parser.add_argument("--precompile", action="store_true",
                        help="first compile every kernel they call, in parallel (book/bench/precompile.py)")
    args = parser.parse_args(argv)

    chosen = [b for b in ALL if not args.only or b.chapter in args.only or b.name in args.only]
    if args.list:
        for b in ALL:
            print(f"{b.chapter}  {b.name:24s} {b.title}")
        return 0
    if not chosen:
        print(f"no benchmark matches {args.only}; see --list", file=sys.stderr)
        return 2

    import torch

    if not torch.cuda.is_available():
        print(
            "No CUDA GPU found: benchmarks must run on a GPU. The site uses the committed results in results/.",
            file=sys.stderr,
        )
        return 2

    if args.precompile:
        from book.bench import precompile

        precompile.run(chosen)
    for i, benchmark in enumerate(chosen, 1):
        started = time.time()
        print(f"[{i}/{len(chosen)}] {benchmark.name}: {benchmark.title}", flush=True)
        try:
            with telemetry.Sampler() as sampler:  # the clock, power and temperature while it runs
                rows = benchmark.run(lambda message, name=benchmark.name: print(f"  {name}: {message}", flush=True))
        except BenchmarkSkipped as reason:
            print(f"  skipped {benchmark.name}: {reason}", flush=True)
            continue
        provenance = collect(benchmark.sources)
        if sampler.summary():
            provenance["telemetry"] = sampler.summary()
        result = {
            "schema": 1,
            "benchmark": benchmark.name,
            "provenance": provenance,
            "rows": rows,
        }
        path = results.write(result)
        print(f"  wrote {path} ({len(rows)} rows, {time.time() - started:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
