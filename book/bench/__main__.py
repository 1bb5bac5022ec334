"""python -m book.bench [--only CHAPTER_OR_NAME ...] [--part K | --merge]: run benchmarks on a GPU and write results
files; a benchmark with parts runs one part per call and the parts merge into its file (book/bench/parts.py)."""

from __future__ import annotations

import argparse
import json
import sys
import time

from book import results, telemetry
from book.bench import ALL, parts
from book.bench.registry import BenchmarkSkipped
from book.provenance import collect


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m book.bench", description=__doc__)
    parser.add_argument("--only", nargs="+", metavar="NAME", help="chapters (ch02) or benchmark names")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    parser.add_argument("--precompile", action="store_true",
                        help="first compile every kernel they call, in parallel (book/bench/precompile.py)")
    parser.add_argument("--part", type=int, metavar="K",
                        help="run part K (from 1) of each chosen benchmark that has parts, into results/<gpu>/parts/")
    parser.add_argument("--merge", action="store_true",
                        help="merge the measured parts of each chosen benchmark into its results file (no GPU needed)")
    args = parser.parse_args(argv)

    chosen = [b for b in ALL if not args.only or b.chapter in args.only or b.name in args.only]
    if args.list:
        for b in ALL:
            print(f"{b.chapter}  {b.name:24s} {b.title}")
        return 0
    if not chosen:
        print(f"no benchmark matches {args.only}; see --list", file=sys.stderr)
        return 2
    if args.merge:
        for benchmark in chosen:
            if benchmark.parts:
                for path in parts.merge_files(benchmark.name, len(benchmark.parts)):
                    print(f"merged the parts of {benchmark.name} into {path}")
        return 0
    if args.part is not None:
        unsplit = [b.name for b in chosen if not 1 <= args.part <= len(b.parts)]
        if unsplit:
            print(f"--part {args.part}: {', '.join(unsplit)} has no such part", file=sys.stderr)
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
        overrides = benchmark.parts[args.part - 1] if args.part is not None else {}
        try:
            with telemetry.Sampler() as sampler, parts.overridden(benchmark.name, overrides):
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
        if args.part is not None:
            path = parts.part_path(benchmark.name, provenance["gpu_slug"], args.part)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(result, indent=1) + "\n")
        else:
            path = results.write(result)
        print(f"  wrote {path} ({len(rows)} rows, {time.time() - started:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
