"""`armload bench plt`: the three PLT counting rules' time and count versus relocation count."""
from __future__ import annotations

import json
import sys


def add_args(p) -> None:
    g = p.add_argument_group("bench plt")
    g.add_argument("--sizes", default="2000,8000,32000", metavar="N,N,...",
                   help="relocation counts of the synthetic modules (bench plt; default 2000,8000,32000)")
    g.add_argument("--externals", type=int, metavar="N",
                   help="external functions per module (bench plt; default: relocations/4)")
    g.add_argument("--svg", metavar="FILE", help="bench plt: write the log-log plot as SVG")
    g.add_argument("--png", metavar="FILE", help="bench plt: write the log-log plot as PNG")


def run(args) -> int:
    from ..bench.plt import format_result, run as bench
    from ..errors import ArmloadError
    try:
        sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    except ValueError:
        raise ArmloadError(f"bad --sizes {args.sizes!r}: use comma-separated counts like 2000,8000,32000") from None
    if not sizes or min(sizes) < 1:
        raise ArmloadError(f"bad --sizes {args.sizes!r}: counts must be positive")
    res = bench(sorted(sizes), externals=args.externals)
    for path in (args.svg, args.png):
        if path:
            from ..inspect.pictures import plt_bench_plot, save
            save(plt_bench_plot(res), path)
    if args.json:
        json.dump({"plt": res}, sys.stdout, indent=2)
        print()
    else:
        print(format_result(res))
    return 0
