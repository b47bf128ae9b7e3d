"""The one matplotlib helper of the reports: figures drawn with the Agg backend (no display) and
embedded as inline base64 PNG data URIs, so a page needs no other file and no network. matplotlib
comes with the 'reports' extra; without it, importing a report writer that draws figures says so."""

from __future__ import annotations

import base64
import io

from rubricrl.core.extras import require

require("matplotlib", extra="reports", feature="HTML reports (figures)")
import matplotlib  # noqa: E402 - after the check that names the extra to install

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

__all__ = ["subplots", "data_uri", "integer_ticks"]


def subplots(*args, **kwargs):
    """`matplotlib.pyplot.subplots` on the Agg backend: (figure, axes)."""
    return plt.subplots(*args, **kwargs)


def integer_ticks(axis) -> None:
    """Only whole numbers as tick labels on `axis` (`ax.xaxis` or `ax.yaxis`): steps, counts."""
    axis.set_major_locator(MaxNLocator(integer=True))


def data_uri(fig, dpi: int = 90) -> str:
    """`fig` as a `data:image/png;base64,...` URI (for an <img src>); the figure is closed."""
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    finally:
        plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
