"""Charts as inline SVG drawn on the server: no JavaScript library in the page."""

from __future__ import annotations

from collections.abc import Sequence

from markupsafe import Markup, escape

WIDTH, HEIGHT, PAD = 600, 120, 18


def bars(values: Sequence[int], label: str, colour: str) -> Markup:
    """One bar per value (a minute), scaled to the largest; the title gives the numbers."""
    peak = max(values, default=0)
    top = peak or 1
    step = (WIDTH - 2 * PAD) / max(len(values), 1)
    shapes = []
    for i, value in enumerate(values):
        height = (HEIGHT - 2 * PAD) * value / top
        x, y = PAD + i * step, HEIGHT - PAD - height
        shapes.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(step - 1, 1):.1f}" '
                      f'height="{height:.1f}" fill="{colour}"><title>{value}</title></rect>')
    caption = escape(f"{label}: {sum(values)} in the last {len(values)} min, peak {peak}/min")
    return Markup(
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{caption}">'
        f'<text x="{PAD}" y="12" font-size="11">{caption}</text>'
        f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" '
        f'stroke="#999"/>' + "".join(shapes) + "</svg>")
