"""Draw the source tree as boxes and its imports as arrows: ``docs/img/modules.png``.

One box per concept: a package directory with its private modules folded in (``media/video``,
``models/qwen2_vl``), or a top-level module of its own (``hasher``, ``registry``). An arrow from
one box to another says some module of the first imports one of the second (``TYPE_CHECKING``
and function-level imports included). Boxes sit in the rows of the stages
``tests/test_architecture.py`` enforces, lowest at the bottom, so every arrow points down or
sideways within a row; the box's number counts its modules.

    python scripts/draw_modules.py            # writes docs/img/modules.png (needs ".[bench]")
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

# The import reading and the stages live with the rules that enforce them.
from test_architecture import (  # noqa: E402
    LAYERS,
    SRC,
    imported_modules,
    layer_of,
    source_modules,
)


def concept_of(module: str, path: Path) -> str:
    """The box a module belongs to: its package directory, or itself for a top-level module."""
    parts = module.split(".")
    if path.name == "__init__.py":
        return "/".join(parts[1:]) or "mediaref"
    package = parts[:-1]
    if package == ["mediaref"]:
        return parts[-1]
    return "/".join(package[1:])


def concept_graph() -> tuple[dict[str, int], dict[str, int], set[tuple[str, str]]]:
    """Each box's module count and stage, and the arrows between boxes."""
    sources = dict(source_modules())
    modules = set(sources)
    concept = {m: concept_of(m, p) for m, p in sources.items()}
    sizes: dict[str, int] = defaultdict(int)
    stage: dict[str, int] = {}
    for module, box in concept.items():
        sizes[box] += 1
        stage[box] = min(stage.get(box, len(LAYERS)), layer_of(module))
    arrows = {
        (concept[m], concept[target])
        for m, path in sources.items()
        for target in imported_modules(m, path, modules)
        if concept[m] != concept[target]
    }
    return dict(sizes), stage, arrows


def draw(output: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    sizes, stage, arrows = concept_graph()
    rows: dict[int, list[str]] = defaultdict(list)
    for box in sorted(sizes):
        rows[stage[box]].append(box)
    width = max(len(r) for r in rows.values())
    position: dict[str, tuple[float, float]] = {}
    for layer, boxes in rows.items():
        for i, box in enumerate(boxes):
            position[box] = ((i + 0.5) * width / len(boxes), layer * 1.6)
    fig, ax = plt.subplots(figsize=(2.1 * width, 1.05 * len(LAYERS) + 1))
    for source, target in sorted(arrows):
        (x0, y0), (x1, y1) = position[source], position[target]
        same_row = y0 == y1
        ax.add_patch(
            FancyArrowPatch(
                (x0, y0 - 0.22),
                (x1, y1 + 0.22),
                arrowstyle="-|>",
                mutation_scale=7,
                lw=0.5,
                alpha=0.35,
                color="tab:red" if same_row else "tab:blue",
                connectionstyle="arc3,rad=0.35" if same_row else "arc3,rad=0.0",
            )
        )
    for box, (x, y) in position.items():
        ax.add_patch(
            FancyBboxPatch(
                (x - 0.46, y - 0.22),
                0.92,
                0.44,
                boxstyle="round,pad=0.02",
                fc="white",
                ec="black",
                lw=0.8,
                zorder=3,
            )
        )
        ax.text(x, y, f"{box}\n({sizes[box]})", ha="center", va="center", fontsize=6.5, zorder=4)
    for layer, prefixes in enumerate(LAYERS):
        label = ", ".join(p.removeprefix("mediaref.") or "mediaref" for p in prefixes)
        ax.text(-0.2, layer * 1.6, label, ha="right", va="center", fontsize=6, color="gray")
    ax.set_xlim(-2.4, width + 0.2)
    ax.set_ylim(-0.6, (len(LAYERS) - 1) * 1.6 + 0.6)
    ax.axis("off")
    ax.set_title(
        f"mediaref's source tree: {len(sizes)} boxes ({sum(sizes.values())} modules), "
        f"{len(arrows)} import arrows; blue points down a stage, red stays within one",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(output, dpi=150)
    print(f"{output.relative_to(ROOT)}: {len(sizes)} boxes, {len(arrows)} arrows")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "img" / "modules.png")
    args = parser.parse_args()
    assert SRC.is_dir()
    draw(args.output.resolve())


if __name__ == "__main__":
    main()
