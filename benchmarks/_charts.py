"""Shared by the benchmark scripts: one chart kind, a grouped bar chart of mediaref vs another way.

Every script that draws takes ``--chart PATH`` (:func:`add_chart_argument`) and writes a PNG there
only when asked, so a quick run with small sizes never overwrites the committed charts in
``docs/img/``. matplotlib is imported on first use: it is in the ``bench`` extra
(``pip install -e '.[bench]'``), not a dependency of mediaref.

Each group on the x axis (a payload, a request kind, an attack) holds one bar per series (the
first series is mediaref's side, the others the alternatives), and a label above the group says
how the alternative compares (``39x``). The y axis turns logarithmic when the values span more
than :data:`LOG_SPAN` (a µs hash beside a 100 ms decode), and durations are labelled in µs, ms or
s rather than as bare seconds.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

# Values spanning more than this factor go on a log axis; on a linear one the small bars vanish.
LOG_SPAN = 30.0
# mediaref first (blue), then the alternatives (orange, grey, ...): the same colours in every chart.
COLOURS = ("#1f77b4", "#ff7f0e", "#7f7f7f", "#2ca02c", "#9467bd")


def add_chart_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--chart",
        type=Path,
        metavar="PATH",
        help="also draw the headline comparison as a PNG here (needs the 'bench' extra)",
    )


def format_seconds(seconds: float) -> str:
    """12 µs, 4.6 ms, 1.23 s: three significant digits at most, in the unit that fits."""
    if seconds <= 0 or math.isnan(seconds):
        return "0"
    scale, unit = _time_unit(seconds)
    value = seconds / scale
    digits = 0 if value >= 100 else 1 if value >= 10 else 2
    return f"{value:.{digits}f} {unit}".replace(".00 ", " ")


def _time_unit(seconds: float) -> tuple[float, str]:
    for scale, unit in ((1.0, "s"), (1e-3, "ms")):
        if seconds >= scale:
            return scale, unit
    return 1e-6, "µs"


def _format_tick(seconds: float) -> str:
    """An axis tick: 1 ms, 250 µs, 1.5 s (no trailing zeros)."""
    if seconds <= 0:
        return "0"
    scale, unit = _time_unit(seconds)
    return f"{seconds / scale:g} {unit}"


def format_ratio(ratio: float) -> str:
    """The annotation above a group: 1.04x, 23.7x, 1,593x."""
    if ratio >= 100:
        return f"{ratio:,.0f}x"
    if ratio >= 10:
        return f"{ratio:.1f}x"
    return f"{ratio:.2f}x"


def grouped_bars(
    path: Path | str,
    *,
    title: str,
    groups: Sequence[str],
    series: Mapping[str, Sequence[float]],
    ylabel: str,
    seconds: bool = False,
    ratios: Sequence[float | str | None] | None = None,
    ratio_caption: str | None = None,
    bar_labels: Mapping[str, Sequence[str]] | None = None,
    log: bool | None = None,
    footnote: str | None = None,
) -> Path:
    """Draw ``series`` (legend label -> one value per group) as grouped bars; write a PNG.

    ``seconds``: the values are durations in seconds; ticks and bar labels get µs/ms/s.
    ``ratios``: the annotation above each group, a number (drawn as ``23.7x``), a text, or None for
    none; by default the second series over the first, which reads as "mediaref is Nx faster"
    when both are costs. ``ratio_caption`` says what the ratio is, under the title.
    ``bar_labels``: text over each bar instead of its value (e.g. "300 frames").
    ``log``: force the y scale; by default log when the values span more than :data:`LOG_SPAN`.
    ``footnote``: a line at the bottom (the command and the machine).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: no display, no GUI toolkit
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise SystemExit("--chart needs matplotlib: pip install -e '.[bench]'") from exc

    names = list(series)
    values = [[float(v) for v in series[name]] for name in names]
    if any(len(row) != len(groups) for row in values):
        raise ValueError("every series needs one value per group")
    if ratios is None and len(names) >= 2:
        ratios = [b / a if a > 0 else None for a, b in zip(values[0], values[1], strict=True)]
    positive = [v for row in values for v in row if v > 0]
    if log is None:
        log = bool(positive) and max(positive) / min(positive) > LOG_SPAN
    # The log axis starts a little under the smallest positive value; a zero bar stays at the
    # bottom (no height), its label saying "0".
    bottom = min(positive) / 3 if (log and positive) else 0.0
    floor = bottom

    fig, ax = plt.subplots(figsize=(max(7.0, 1.6 * len(groups) + 2.5), 5.0), dpi=110)
    width = 0.8 / len(names)
    tops = [0.0] * len(groups)
    label_lines = 1
    for i, (name, row) in enumerate(zip(names, values, strict=True)):
        xs = [g + (i - (len(names) - 1) / 2) * width for g in range(len(groups))]
        heights = [max(v, floor) for v in row]
        bars = ax.bar(xs, heights, width * 0.92, label=name, color=COLOURS[i % len(COLOURS)])
        texts = bar_labels.get(name) if bar_labels else None
        if texts is None:
            texts = [format_seconds(v) if seconds else f"{v:,.3g}" for v in row]
        ax.bar_label(bars, labels=list(texts), fontsize=7.5, padding=2)
        label_lines = max([label_lines, *(text.count("\n") + 1 for text in texts)])
        tops = [max(t, h) for t, h in zip(tops, heights, strict=True)]

    if log:
        ax.set_yscale("log")
    if seconds:
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: _format_tick(v)))
    else:
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.10g}"))
    # Head room for the value labels and the ratio above them (in decades on a log axis).
    top = max(tops) if tops else 1.0
    if log:
        ax.set_ylim(bottom, top * 10 ** (0.6 + 0.25 * label_lines))
    else:
        ax.set_ylim(0, top * (1.2 + 0.08 * label_lines))
    if ratios is not None:
        # Above the taller bar's value label: offset in points, so it never overlaps the label.
        lift = 4 + 10 * label_lines
        for g, ratio in enumerate(ratios):
            if ratio is None:
                continue
            text = format_ratio(ratio) if isinstance(ratio, (int, float)) else ratio
            ax.annotate(
                text,
                (g, tops[g]),
                xytext=(0, lift),
                textcoords="offset points",
                ha="center",
                va="bottom",
                fontsize=10,
                fontweight="bold",
            )

    ax.set_xticks(range(len(groups)), list(groups), fontsize=8.5)
    ax.set_ylabel(ylabel)
    ax.set_title(title + (f"\n{ratio_caption}" if ratio_caption else ""), fontsize=10.5)
    ax.grid(axis="y", which="major", alpha=0.25)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    # The legend goes under the axes, above the footnote: inside, it would cover tall bars.
    height = fig.get_figheight()
    footnote_h = 0.22 / height if footnote else 0.0
    columns = min(len(names), 2)
    legend_rows = math.ceil(len(names) / columns)
    legend_h = (0.1 + 0.2 * legend_rows) / height
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(
        handles,
        labels,
        loc="lower center",
        bbox_to_anchor=(0.5, footnote_h),
        ncol=columns,
        fontsize=8.5,
        frameon=False,
    )
    if footnote:
        fig.text(0.01, 0.01, footnote, fontsize=7, color="#555555", ha="left", va="bottom")
    fig.tight_layout(rect=(0, footnote_h + legend_h, 1, 1))
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    print(f"chart written to {out}")
    return out


# Options that only name where output goes: left out of the command a chart shows.
_OUTPUT_OPTIONS = ("--chart", "--json")
# Options whose value is a path on the measuring machine: shown as what a reader substitutes.
_MACHINE_PATHS = {"--vllm-python": "VLLM_VENV/bin/python"}


def command_line(argv: Sequence[str] | None = None) -> str:
    """The command that drew the chart, less its output paths: what re-measures the figures."""
    args = list(sys.argv if argv is None else argv)
    shown = [f"python benchmarks/{Path(args[0]).name}"]
    skip = False
    for arg in args[1:]:
        option = arg.split("=", 1)[0]
        if skip:
            skip = False
        elif arg in _OUTPUT_OPTIONS:
            skip = True
        elif option in _MACHINE_PATHS:
            shown += [option, _MACHINE_PATHS[option]]
            skip = option == arg
        elif not arg.startswith(tuple(f"{option}=" for option in _OUTPUT_OPTIONS)):
            shown.append(arg)
    return " ".join(shown)


def machine_note(extra: str | None = None) -> str:
    """A footnote: CPU count and Python, then ``extra`` (by default the command line)."""
    note = f"{os.cpu_count()} CPUs, Python {platform.python_version()}"
    extra = command_line() if extra is None else extra
    return f"{note}; {extra}" if extra else note


__all__ = [
    "add_chart_argument",
    "command_line",
    "format_ratio",
    "format_seconds",
    "grouped_bars",
    "machine_note",
]
