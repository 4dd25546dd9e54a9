"""``--plot DIR``: one PNG per field, estimated beside true (matplotlib, imported lazily).

matplotlib is the optional extra ``plot`` (``pip install 'privstream[plot]'``);
nothing here is imported unless ``--plot`` is given.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, NamedTuple

MISSING_MATPLOTLIB = (
    "--plot needs matplotlib, which is not installed: pip install 'privstream[plot]' "
    "(or pip install matplotlib)"
)


def matplotlib_available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _file_name(field: str, taken: set[str]) -> str:
    base = re.sub(r"[^A-Za-z0-9._-]", "_", field).strip(".") or "field"
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}-{n}"
    taken.add(name)
    return f"{name}.png"


class Plotted(NamedTuple):
    """The files written, and for each field without a plot, why."""

    written: list[Path]
    reasons: dict[str, str]


def not_plotted(entry: dict[str, Any]) -> str | None:
    """Why an estimated field gets no plot (None: it gets one)."""
    if entry["records"] == 0:
        return "no usable values"
    if "frequencies" in entry and not entry["frequencies"]:
        return "nothing estimated (a local-hashing field without --candidates)"
    if not any(key in entry for key in ("frequencies", "histogram", "curve", "mean")):
        return "nothing estimated"
    return None


def write_plots(report: dict[str, Any], directory: str | Path) -> Plotted:
    """One PNG per estimated field, or the reason there is none."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    plotted = Plotted([], {})
    taken: set[str] = set()
    level = f"{report['confidence']:.0%}"
    for entry in report["fields"]:
        reason = not_plotted(entry)
        if reason is not None:
            plotted.reasons[entry["name"]] = reason
            continue
        if entry.get("frequencies"):
            figure = _frequencies(plt, entry, level)
        elif entry.get("histogram"):
            figure = _histogram(plt, entry, level)
        elif entry.get("curve"):
            figure = _curve(plt, entry, level)
        else:
            figure = _mean(plt, entry, level)
        path = out / _file_name(entry["name"], taken)
        figure.savefig(path, dpi=110)
        plt.close(figure)
        plotted.written.append(path)
    return plotted


def _mean(plt: Any, entry: dict[str, Any], level: str) -> Any:
    """A mean without a histogram (mean-oriented mechanisms): its intervals on the bounds."""
    mean = entry["mean"]
    figure, ax = plt.subplots(figsize=(8, 2.8), layout="constrained")
    for y, (key, label) in enumerate(
        (("ci", f"{level} CI (noise)"), ("ci_population", f"{level} CI with the spread"))
    ):
        low, high = mean[key]
        if low is not None and high is not None:
            ax.plot([low, high], [y, y], "-|", color="tab:blue", lw=2, ms=10, label=label)
    ax.plot([mean["estimate"]] * 2, [0, 1], "o", color="tab:blue", label="estimated mean")
    if "true" in mean:
        ax.axvline(mean["true"], color="tab:red", ls=":", label="true mean (clamped)")
    lower, upper = entry["bounds"]
    ax.axvspan(lower, upper, color="tab:gray", alpha=0.1, label="bounds")
    ax.set_yticks([0, 1], ["noise", "population"])
    ax.set_ylim(-0.8, 1.8)
    ax.set_xlabel(entry["name"])
    ax.set_title(f"{_title(entry)}\nthe mean only: {entry['mechanism']} gives no histogram")
    ax.legend(fontsize="small", loc="upper right")
    return figure


def _title(entry: dict[str, Any]) -> str:
    return (
        f"{entry['name']} ({entry['mechanism']}, eps={entry['epsilon']:g}, "
        f"delta={entry['delta']:g}, n={entry['records']:,})"
    )


def _frequencies(plt: Any, entry: dict[str, Any], level: str) -> Any:
    rows = sorted(entry["frequencies"], key=lambda r: -r["estimate"])
    labels = [str(r["value"]) for r in rows]
    x = list(range(len(rows)))
    width = max(6.0, 0.28 * len(rows) + 2.0)
    figure, ax = plt.subplots(figsize=(width, 4.5), layout="constrained")
    errors = [
        [r["estimate"] - r["ci"][0] for r in rows],
        [r["ci"][1] - r["estimate"] for r in rows],
    ]
    ax.bar(
        x,
        [r["estimate"] for r in rows],
        yerr=errors,
        capsize=2,
        color="tab:blue",
        alpha=0.8,
        label=f"estimate ({level} CI)",
    )
    if any("raw_share" in r for r in rows):
        ax.plot(
            x,
            [r.get("raw_share") for r in rows],
            "s",
            color="tab:gray",
            ms=4,
            label="raw share of released values",
        )
    if any("true" in r for r in rows):
        ax.plot(x, [r.get("true") for r in rows], "D", color="tab:red", ms=5, label="true")
    ax.set_xticks(x, labels, rotation=90 if len(rows) > 8 else 0)
    ax.set_ylabel("share of records")
    ax.axhline(0.0, color="black", lw=0.6)
    ax.set_title(_title(entry))
    ax.legend()
    return figure


def _histogram(plt: Any, entry: dict[str, Any], level: str) -> Any:
    hist = entry["histogram"]
    bins = hist["bins"]
    centres = [(b["lower"] + b["upper"]) / 2.0 for b in bins]
    widths = [max(b["upper"] - b["lower"], 1.0 if hist["integer_bins"] else 0.0) for b in bins]
    figure, ax = plt.subplots(figsize=(8, 4.5), layout="constrained")
    shown = [i for i, b in enumerate(bins) if not b.get("unreliable") and "ci" in b]
    if shown:  # withheld bins are not drawn: the plot says no more than the table
        estimates = [bins[i]["estimate"] for i in shown]
        errors = [
            [bins[i]["estimate"] - bins[i]["ci"][0] for i in shown],
            [bins[i]["ci"][1] - bins[i]["estimate"] for i in shown],
        ]
        ax.bar(
            [centres[i] for i in shown],
            estimates,
            width=[0.9 * widths[i] for i in shown],
            yerr=errors,
            capsize=2,
            color="tab:blue",
            alpha=0.8,
            label=f"estimate (deconvolved, {level} CI with the bias bound)",
        )
    else:
        ax.text(0.5, 0.9, "every bin withheld: too fine for n and epsilon",
                transform=ax.transAxes, ha="center")  # fmt: skip
    ax.step(
        centres,
        [b["noisy_share"] for b in bins],
        where="mid",
        color="tab:gray",
        label="noisy histogram (released values)",
    )
    if any("true" in b for b in bins):
        ax.plot(
            centres,
            [b.get("true") for b in bins],
            "D",
            color="tab:red",
            ms=5,
            label="true (clamped)",
        )
    mean = entry.get("mean")
    if mean:
        ax.axvline(
            mean["estimate"],
            color="tab:blue",
            ls="--",
            lw=1,
            label=f"mean {mean['estimate']:.4g} ({level} CI shaded)",
        )
        low, high = mean["ci"]
        ax.axvspan(low, high, color="tab:blue", alpha=0.15)
        if "true" in mean:
            ax.axvline(mean["true"], color="tab:red", ls=":", lw=1, label="true mean (clamped)")
    ax.set_xlabel(entry["name"])
    ax.set_ylabel("share of records")
    ax.set_title(_title(entry))
    ax.legend(fontsize="small")
    return figure


def _curve(plt: Any, entry: dict[str, Any], level: str) -> Any:
    curve = entry["curve"]
    x = curve["points"]
    figure, ax = plt.subplots(figsize=(8, 4.5), layout="constrained")
    ax.plot(x, curve["mean"], "-o", color="tab:blue", ms=3, label="estimated mean")
    ax.fill_between(
        x,
        curve["ci_low"],
        curve["ci_high"],
        color="tab:blue",
        alpha=0.25,
        label=f"{level} pointwise band (noise)",
    )
    if all(v is not None for v in curve["ci_population_low"]):
        ax.plot(
            x,
            curve["ci_population_low"],
            "--",
            color="tab:blue",
            lw=0.8,
            label=f"{level} band with the spread between records",
        )
        ax.plot(x, curve["ci_population_high"], "--", color="tab:blue", lw=0.8)
    if "true" in curve:
        ax.plot(x, curve["true"], "-", color="tab:red", label="true mean (clipped)")
    ax.set_xlabel("grid point" if entry["kind"] == "functional" else "coordinate")
    ax.set_title(_title(entry))
    ax.legend(fontsize="small")
    return figure
