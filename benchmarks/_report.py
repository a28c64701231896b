"""Shared output helpers of the benchmark programs: progress bar, tables, CSV / JSON."""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch

try:
    from tqdm import tqdm
except ImportError:  # pragma: no cover
    tqdm = None


def progress(items: Sequence, desc: str) -> Iterable:
    """``items`` behind a progress bar on stderr (plain iteration without tqdm)."""
    return tqdm(items, desc=desc, file=sys.stderr) if tqdm else items


def mean_std(values: Sequence[float], spec: str = ".2e", std_spec: str = ".1e") -> str:
    """``"mean ± std"`` (population std) of ``values``; the value alone for one run."""
    if not values:
        return "-"
    if len(values) == 1:
        return format(values[0], spec)
    mean, std = statistics.mean(values), statistics.pstdev(values)
    return f"{format(mean, spec)} ± {format(std, std_spec)}"


def mean_and_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and population std of ``values`` (std 0 for one run): the CSV's two columns."""
    return statistics.mean(values), statistics.pstdev(values) if len(values) > 1 else 0.0


def print_table(title: str, header: list[str], rows: list[list[str]]) -> None:
    """Print an aligned text table under ``title``."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    line = " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
    print(f"\n{title}\n{line}\n{'-' * len(line)}")
    for r in rows:
        print(" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))


def write_csv(path: Path, header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Write one CSV file: a header line, then ``rows`` (numbers are written as numbers)."""
    with open(path, "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(header)
        wr.writerows(rows)


def write_results(
    out: Path, stem: str, header: Sequence[str], rows: Sequence[Sequence[object]], payload: dict
) -> None:
    """Write ``rows`` under ``header`` as ``stem.csv`` and the raw runs as ``stem.json``."""
    write_csv(out / f"{stem}.csv", header, rows)
    (out / f"{stem}.json").write_text(json.dumps(payload, indent=2))


def add_run_args(ap: argparse.ArgumentParser, name: str) -> None:
    """The options every flow benchmark shares: ``--seeds``, ``--threads``, ``--out``."""
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: fastest here)")
    ap.add_argument("--out", default=f"benchmarks/out/{name}", help="output folder")


def prepare(args: argparse.Namespace) -> Path:
    """Set the torch thread count and create the output folder, which is returned."""
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    return out


def plot_curves(
    means: dict[str, list[float]],
    x: list[int],
    *,
    xlabel: str,
    ylabel: str,
    title: str,
    path: Path,
    logy: bool = False,
    bands: dict[str, tuple[list[float], list[float]]] | None = None,
) -> None:
    """One line per method (label -> values at ``x``), saved as a PNG.

    ``bands`` (label -> (lower, upper) at ``x``) shades a band around a method's line,
    e.g. the spread over seeds. The legend sits to the right of the axes, off the data.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.5, 4))
    for label, values in means.items():
        (line,) = ax.plot(x, values, "o-", label=label)
        if bands and label in bands:
            lower, upper = bands[label]
            ax.fill_between(x, lower, upper, color=line.get_color(), alpha=0.2, lw=0)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=8)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def save_with_legend(fig, handles: dict, path: Path, ncol: int, bottom: float) -> None:
    """Save ``fig`` with one legend of ``handles`` (label -> artist) below its panels.

    ``bottom`` is the share of the figure's height kept for the legend.
    """
    import matplotlib.pyplot as plt

    fig.legend(
        list(handles.values()),
        list(handles),
        loc="lower center",
        ncol=ncol,
        fontsize=7.5,
        frameon=False,
        bbox_to_anchor=(0.5, 0.0),
    )
    fig.tight_layout(rect=(0, bottom, 1, 1))
    fig.savefig(path, dpi=130)
    plt.close(fig)
