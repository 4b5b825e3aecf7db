"""PNG plots for ``advise cost --plot`` and ``tune --plot`` (matplotlib, an optional extra).

matplotlib is not a dependency of the package: ``pip install 'provision-gpu[plot]'`` brings it. Without
it, ``--plot`` is one bad-input line naming the extra, raised before any work is done.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from provision.errors import BadInput


def require_matplotlib() -> Any:
    """The ``matplotlib.pyplot`` module on the non-interactive Agg backend, or BadInput."""
    try:
        import matplotlib  # noqa: PLC0415 (matplotlib is the optional `plot` extra: loaded only to draw)

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415 (matplotlib is the optional `plot` extra: loaded only to draw)
    except ImportError as exc:
        raise BadInput(
            "--plot needs matplotlib, which is not installed",
            "pip install 'provision-gpu[plot]', or drop --plot",
        ) from exc
    return plt


def check_target(path: Path) -> None:
    """Fail before measuring when the PNG could not be written where asked."""
    if path.suffix.lower() != ".png":
        raise BadInput(f"--plot {path}: not a .png file name", "give a path ending in .png")
    if not path.parent.resolve().is_dir():
        raise BadInput(f"--plot {path}: folder {path.parent} does not exist", "create it or pick another path")


def cost_plot(
    path: Path,
    *,
    hours: list[float],
    cloud: list[float],
    own: list[float],
    break_even: float | None,
    hours_per_day: float,
    title: str,
) -> None:
    plt = require_matplotlib()
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    ax.plot(hours, cloud, label="cloud per year", color="#1f77b4")
    ax.plot(hours, own, label="own server per year", color="#d62728")
    if break_even is not None:
        ax.axvline(break_even, color="grey", linestyle="--", linewidth=1)
        ax.annotate(
            f"break-even {break_even:.1f} h/day",
            xy=(break_even, max(*own, *cloud) * 0.5),
            xytext=(6, 0),
            textcoords="offset points",
            color="grey",
        )
    ax.axvline(hours_per_day, color="black", linewidth=0.8, alpha=0.4)
    ax.set_xlim(0, 24)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("GPU hours per day")
    ax.set_ylabel("USD per year")
    ax.set_title(title)
    ax.legend(loc="upper left")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)


def tune_plot(path: Path, doc: dict[str, Any]) -> None:
    """Throughput against batch size and against DataLoader workers (pinned and not)."""
    plt = require_matplotlib()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), dpi=110)
    rows = [r for r in doc.get("batch_sizes", []) if r.get("samples_per_s")]
    left.plot([r["batch_size"] for r in rows], [r["samples_per_s"] for r in rows], marker="o")
    best = doc.get("best_batch_size")
    if best is not None:
        left.axvline(best, color="grey", linestyle="--", linewidth=1, label=f"sweet spot {best}")
        left.legend(loc="lower right")
    left.set_xscale("log", base=2)
    left.set_xticks([r["batch_size"] for r in rows], [str(r["batch_size"]) for r in rows])
    left.set_xlabel("batch size")
    left.set_ylabel("samples/s (compute only)")
    left.set_title("throughput against batch size")
    left.grid(alpha=0.3)
    for pinned, style in ((False, "o-"), (True, "s--")):
        pts = [w for w in doc.get("workers", []) if bool(w.get("pin_memory")) is pinned]
        if pts:
            label = "pinned memory" if pinned else "pageable memory"
            right.plot([w["workers"] for w in pts], [w["samples_per_s"] for w in pts], style, label=label)
    counts = sorted({int(w["workers"]) for w in doc.get("workers", [])})
    right.set_xticks(counts, [str(c) for c in counts])
    right.set_xlabel("DataLoader workers")
    right.set_ylabel("samples/s (end to end)")
    right.set_title(f"throughput against workers (batch {doc.get('workers_batch_size', best)})")
    right.legend(loc="best")
    right.grid(alpha=0.3)
    fig.suptitle(f"provision tune on {doc.get('device_name') or doc.get('device', '?')}")
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
