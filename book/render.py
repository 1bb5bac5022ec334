"""Pieces pages are made of: markdown tables, SVG figures, provenance lines, stale-result warnings and notices."""

from __future__ import annotations

import io

from book.gpus import Archive
from book.provenance import stale_sources

try:
    import matplotlib
except ModuleNotFoundError:  # a bare GPU Python (torch, triton, numpy, pytest): benchmarks and GPU tests still run
    plt = None
else:
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({
        "svg.hashsalt": "flash-attention-book",  # stable element ids, so rebuilds give the same files
        "svg.fonttype": "none",  # text stays text: selectable, and no font files needed
        "font.size": 10,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "figure.dpi": 100,
    })


def _pyplot():
    if plt is None:
        raise ModuleNotFoundError("drawing a figure needs matplotlib: `make setup` (or `make setup-gpu`) installs it")
    return plt


def span(values: list[float], fmt: str) -> str:
    """The range of the values, "0.97–1.05", or one figure where both ends print alike."""
    low, high = format(min(values), fmt), format(max(values), fmt)
    return low if low == high else f"{low}–{high}"


def table(headers: list[str], rows: list[list[object]]) -> str:
    """A markdown table; floats get three significant figures, None becomes an em dash."""
    def cell(value: object) -> str:
        if value is None:
            return "—"
        if isinstance(value, float):
            return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
        return str(value)

    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---:" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def line_plot(
    series: dict[str, tuple[list[float], list[float | None]]],
    *,
    xlabel: str,
    ylabel: str,
    title: str,
    logx: bool = True,
    logy: bool = False,
    hlines: dict[str, float] | None = None,
):
    """A figure with one line per series; points whose y is None (out of memory, not run) are left out."""
    fig, ax = _pyplot().subplots(figsize=(7.0, 4.0))
    markers = "osD^v<>p*h"
    for i, (label, (xs, ys)) in enumerate(series.items()):
        points = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
        if points:
            ax.plot(*zip(*points, strict=True), marker=markers[i % len(markers)], markersize=4, label=label)
    for label, y in (hlines or {}).items():
        ax.axhline(y, linestyle="--", linewidth=1, color="grey")
        ax.annotate(label, (0.01, y), xycoords=("axes fraction", "data"), va="bottom", fontsize=8, color="dimgray")
    if logx:
        ax.set_xscale("log", base=2 if all(_is_power_of_two(x) for s in series.values() for x in s[0]) else 10)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _is_power_of_two(x: float) -> bool:
    return float(x).is_integer() and int(x) > 0 and (int(x) & (int(x) - 1)) == 0


def svg_bytes(fig) -> bytes:
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None})
    _pyplot().close(fig)
    return buffer.getvalue().encode()


def _short_commit(commit: str) -> str:
    return commit[:12] + ("-dirty" if commit.endswith("-dirty") else "")


def _cudnn(provenance: dict) -> str:
    """", cuDNN 91002" where the run recorded it (runs before the book recorded it did not)."""
    return f', cuDNN {provenance["cudnn"]}' if provenance.get("cudnn") else ""


def _telemetry(provenance: dict) -> str:
    """" While it ran: SM clock 1,755–1,980 MHz, 410–700 W, 38–64 °C." where the run sampled them."""
    t = provenance.get("telemetry")
    if not t:
        return ""
    spans = [f'SM clock {t["sm_mhz"]["min"]:,.0f}–{t["sm_mhz"]["max"]:,.0f} MHz',
             f'{t["power_w"]["min"]:,.0f}–{t["power_w"]["max"]:,.0f} W',
             f'{t["temperature_c"]["min"]:.0f}–{t["temperature_c"]["max"]:.0f} °C']
    return " While it ran: " + ", ".join(spans) + "."


def provenance_line(provenance: dict) -> str:
    commit = _short_commit(provenance["commit"])
    return (
        f'<p class="provenance">Measured on {provenance["gpu"]} (driver {provenance["driver"]}, '
        f'CUDA {provenance["cuda"]}{_cudnn(provenance)}), torch {provenance["torch"]}, triton {provenance["triton"]}, '
        f'{provenance["date"][:10]}, commit <code>{commit}</code>.{_telemetry(provenance)}</p>'
    )


STALE_TITLE = "These numbers were measured on an older version of this kernel"


def _changed_sources(provenance: dict) -> str | None:
    """The measured sources that changed since the run, as a list in backticks (None if none did)."""
    changed = stale_sources(provenance)
    return ", ".join(f"`{path}`" for path in changed) if changed else None


def stale_warning(provenance: dict) -> str | None:
    files = _changed_sources(provenance)
    if files is None:
        return None
    return (
        f'!!! warning "{STALE_TITLE}"\n\n'
        f"    {files} changed after this run. Run `make bench` on a GPU to refresh the numbers.\n"
    )


ARCHIVED_TITLE = "Archived measurement"


def archived_notice(provenance: dict, archive: Archive) -> str | None:
    """The notice above a view of an archived GPU that was measured on older sources (None if it is fresh)."""
    files = _changed_sources(provenance)
    if files is None:
        return None
    return (
        f'!!! note "{ARCHIVED_TITLE}"\n\n'
        f'    Measured on {provenance["gpu"]} on {provenance["date"][:10]} at commit '
        f'`{_short_commit(provenance["commit"])}`, with an earlier version of {files}; not measured again since. '
        f"This GPU is archived since {archive.since} ({archive.why}).\n"
    )


def panel_plot(panels: dict[str, dict[str, tuple[list[float], list[float | None]]]], *, xlabel: str, ylabel: str,
               panel_width: float = 3.2, height: float = 3.8, legend_below: bool = False):
    """A row of panels with a shared y axis (a log2 x axis), one line per series; points whose y is None (out of
    memory, not run) are left out. The same label keeps its color and marker in every panel. The legend goes on the
    first panel, or below the panels (every series that appears in some panel, once)."""
    fig, axes = _pyplot().subplots(1, len(panels), figsize=(panel_width * len(panels), height), sharey=True,
                                   squeeze=False)
    labels = list(dict.fromkeys(label for series in panels.values() for label in series))
    markers = "osD^v<>p*h"
    for ax, (title, series) in zip(axes[0], panels.items(), strict=True):
        for label, (xs, ys) in series.items():
            points = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
            if points:
                i = labels.index(label)
                ax.plot(*zip(*points, strict=True), marker=markers[i % len(markers)], color=f"C{i}", markersize=4,
                        label=label)
        ax.set_xscale("log", base=2)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel(xlabel)
    axes[0][0].set_ylabel(ylabel)
    if legend_below:
        shown = {}
        for ax in axes[0]:
            shown.update({label: handle for handle, label in zip(*ax.get_legend_handles_labels(), strict=True)})
        fig.legend(list(shown.values()), list(shown), loc="lower center", ncol=3, fontsize=8)
        fig.tight_layout(rect=(0, 0.12, 1, 1))
    else:
        axes[0][0].legend(fontsize=7)
        fig.tight_layout()
    return fig
