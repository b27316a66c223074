"""Checks of drawn figures for the plot tests: a PNG decoded instead of trusted by its size, and matplotlib's own
objects after a draw (tick texts and offset text, text extents measured with the renderer, legend entries and where
each line's markers land); plus the small typed study configs and tables the study figures are built from."""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg


def assert_png_drawn(path, width_in: Optional[float] = None, height_in: Optional[float] = None,
                     dpi: Optional[int] = None) -> None:
    """``path`` decodes as a PNG (of ``width_in x height_in`` inches at ``dpi`` when given) whose pixels are not one
    flat colour: lines, text and axes drawn give hundreds of distinct anti-aliased colours, a blank figure one."""
    from matplotlib.image import imread

    img = imread(str(path))
    if dpi is not None:
        assert img.shape[:2] == (round(height_in * dpi), round(width_in * dpi)), img.shape
    rgb = (img[..., :3] * 255).round().astype(np.uint32).reshape(-1, 3)
    colours = np.unique((rgb[:, 0] << 16) | (rgb[:, 1] << 8) | rgb[:, 2])  # one integer per colour (axis=0: 2 s a PNG)
    assert len(colours) > 50, f"{path}: {len(colours)} colours (a blank or nearly blank figure)"


# ------------------------------------------------------------------------------------ a figure, drawn and read
def draw(fig):
    FigureCanvasAgg(fig).draw()
    return fig


def _in_view(axis):
    """(location, label) of the major ticks inside the view, after a draw (matplotlib keeps the labels of ticks
    just outside it in its lists, undrawn)."""
    lo, hi = sorted(axis.get_view_interval())
    tol = 1e-12 * max(abs(lo), abs(hi))
    return [(loc, lab) for loc, lab in zip(axis.get_majorticklocs(), axis.get_majorticklabels())
            if lo - tol <= loc <= hi + tol]


def ticks(axis):
    """(location, text) of the major ticks inside the view, after a draw."""
    return [(loc, lab.get_text()) for loc, lab in _in_view(axis)]


def drawn_ticklabels(axis):
    """The tick label texts ``axis`` draws (those of :func:`ticks`)."""
    return [lab for _, lab in _in_view(axis)]


def check_plain_value_axis(axis, min_ticks=3):
    """Tick texts are plain numbers equal to their tick positions (so no hidden offset or exponent), distinct, and
    there is no offset text."""
    assert axis.get_offset_text().get_text() == ""
    got = ticks(axis)
    assert len(got) >= min_ticks, got
    for loc, text in got:
        assert not any(c in text for c in "×$^e"), text
        assert math.isclose(float(text.replace("−", "-")), loc, rel_tol=1e-5, abs_tol=1e-9), (loc, text)
    assert len({t for _, t in got}) == len(got), got


def no_overlap(labels, renderer):
    """No two of the visible, non-empty texts ``labels`` overlap, their extents measured by ``renderer``."""
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in labels if t.get_text() and t.get_visible()]
    for i, (ta, a) in enumerate(boxes):
        for tb, b in boxes[i + 1:]:
            assert not a.overlaps(b), (ta, tb, a, b)


def texts(fig):
    """Every text a reader sees on ``fig``: suptitle, figure texts, axes titles, axis labels and in-axes texts."""
    out = [fig.get_suptitle()] + [t.get_text() for t in fig.texts]
    for ax in fig.axes:
        out += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()] + [t.get_text() for t in ax.texts]
    return [t for t in out if t]


def series(ax):
    """(legend label, the Line2D drawn for it) of every legend entry of ``ax`` (an errorbar's data line for an
    errorbar entry)."""
    handles, labels = ax.get_legend_handles_labels()
    return [(lab, h.lines[0] if hasattr(h, "lines") else h) for h, lab in zip(handles, labels)]


def _marker_points(line):
    """Display coordinates of the markers ``line`` draws (its ``markevery`` applied)."""
    pts = line.get_transform().transform(_xy(line))
    every = line.get_markevery()
    if every is None:
        return pts
    start, step = every if isinstance(every, tuple) else (0, every)
    return pts[start::step]


def _xy(line):
    return np.column_stack([np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)])


def _same_data(a, b):
    return _xy(a).shape == _xy(b).shape and np.allclose(_xy(a), _xy(b))


def check_every_series_visible(ax, fig):
    """Every legend entry's line is on the axes, and no line disappears under the others: it differs in line style
    or marker from every line with the same data, and some of its markers are not covered by a marker drawn over
    it (a later line's filled marker within its radius, at least 0.8 of its size: a filled square 1 pt smaller than
    a circle leaves of it a ring under 1 pt wide, which does not read as a marker; an open one covers nothing)."""
    entries = series(ax)
    assert entries, "no legend entries"
    drawn = ax.get_lines()
    px = fig.dpi / 72
    for i, (lab, line) in enumerate(entries):
        assert line in drawn and line.get_visible(), lab
        assert line.get_marker() not in (None, "None", "", " "), f"{lab}: no marker"
        order = drawn.index(line)
        for lab2, other in entries[:i] + entries[i + 1:]:
            if _same_data(other, line):
                style = (line.get_linestyle(), line.get_marker())
                assert (other.get_linestyle(), other.get_marker()) != style, (lab, lab2)
        over = [o for _, o in entries
                if o is not line and (o.get_zorder(), drawn.index(o)) > (line.get_zorder(), order)]
        mine = _marker_points(line)
        r = line.get_markersize() * px / 2

        def covered(p):
            return any(o.get_markerfacecolor() != "none" and o.get_markersize() >= 0.8 * line.get_markersize()
                       and (np.hypot(*(_marker_points(o) - p).T) < r).any() for o in over)

        assert not all(covered(p) for p in mine), f"{lab}: every marker is covered by a later line's"


def check_every_point_visible(ax, fig):
    """Every scatter point of ``ax`` shows: no point lies under a later collection's filled marker within its radius
    (a filled triangle drawn 0.02 to the side of another, at the same height, hid it: 7 markers for n = 8); an open
    marker (no face) covers nothing. Returns the number of points checked."""
    from matplotlib.collections import PathCollection

    colls = [c for c in ax.collections if isinstance(c, PathCollection) and len(c.get_offsets())]
    px = fig.dpi / 72
    checked = 0
    for i, c in enumerate(colls):
        r = np.sqrt(c.get_sizes()[0]) * px / 2
        for p in c.get_offset_transform().transform(c.get_offsets()):
            over = [o for o in colls[i + 1:] if len(o.get_facecolor()) and o.get_facecolor()[0][3] > 0
                    and np.sqrt(o.get_sizes()[0]) >= 0.8 * np.sqrt(c.get_sizes()[0])]
            hit = [o for o in over if (np.hypot(*(o.get_offset_transform().transform(o.get_offsets()) - p).T)
                                       < r).any()]
            assert not hit, f"a point of {c.get_label()} at {p} lies under a later filled marker"
            checked += 1
    return checked


def inside_figure(fig, artist):
    r = fig.canvas.get_renderer()
    box, page = artist.get_window_extent(r), fig.bbox
    inside = box.x0 >= page.x0 - 1 and box.x1 <= page.x1 + 1 and box.y0 >= page.y0 - 1 and box.y1 <= page.y1 + 1
    assert inside, (box, page)



def check_legend_under(fig, ax):
    """``ax``'s legend covers neither the axes nor its x axis's label and tick labels, and lies inside the figure:
    matplotlib's own window extents of what it drew (a legend anchored at a fixed fraction of the axes' height sat on
    the x label once the axes were short)."""
    r = fig.canvas.get_renderer()
    legend = ax.get_legend()
    assert not legend.get_window_extent(r).overlaps(ax.get_window_extent(r)), "the legend covers the axes"
    under = [ax.xaxis.label] + [t for t in ax.xaxis.get_ticklabels() if t.get_visible() and t.get_text()]
    covered = [t.get_text() for t in under if legend.get_window_extent(r).overlaps(t.get_window_extent(r))]
    assert not covered, f"the legend covers the x axis's {covered}"
    inside_figure(fig, legend)


# ------------------------------------------------------------------------------------ study configs and tables
def study(L=256, alphas=(0.0, 0.3), seeds=(0,), quick=False, finetune=None, methods=None, **eval_fields):
    """A study config (the typed one the figures read) with the fields these figures use."""
    from torchtune_longshort.study.config import StudyConfig

    return StudyConfig.from_mapping({
        "name": "plots", "recipe_config": "configs/tiny/longshort_stdlib.yaml", "L0": 128, "L": L,
        "base": {"pretrain": {"max_steps": 1}}, "model": {"_component_": "torchtune.models.llama2.llama2"},
        "finetune": finetune or {"max_steps": 1}, "methods": methods or {"pi": {"method": "linear"}},
        "alphas": list(alphas), "seeds": list(seeds), "quick": quick, "eval": eval_fields})


def lengths_cfg(lengths, **fields):
    """:func:`study` with ``lengths`` as its ppl and misalignment lengths."""
    eval_fields = {k: fields.pop(k) for k in list(fields) if k not in ("alphas", "seeds", "quick", "methods")}
    return study(misalignment_lengths=lengths, ppl_lengths=lengths, **eval_fields, **fields)


def table(values_by_alpha, lengths, n=1):
    """A line figure's table for method ``pi``: one row per alpha, a cell per length holding ``n`` seeds."""
    from torchtune_longshort.eval.tasks.common.lengths import length_label

    rows = []
    for a, vals in values_by_alpha.items():
        rows.append({"label": f"alpha {a}", "alpha": a,
                     "cells": {length_label(x): {"mean": v, "sd": None, "n": n if v is not None else 0}
                               for x, v in zip(lengths, vals)}})
    return {"methods": {"pi": rows}}


def claims_cfg(seeds=(0, 1, 2), quick=False, **fields):
    """The claims figures' study: L 512, alphas 0 / 0.1, ppl and passkey at 128 / 512, misalignment at 512."""
    methods = fields.pop("methods", None)
    return study(L=512, alphas=fields.pop("alphas", (0.0, 0.1)), seeds=seeds, quick=quick, methods=methods,
                 finetune={"max_steps": 1, "overrides": {"e_range": [1, "L/2"]}},
                 ppl_lengths=fields.pop("ppl_lengths", [128, 512]), passkey_lengths=[128, 512],
                 misalignment_lengths=[512], **fields)
