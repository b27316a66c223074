"""A PNG check that decodes the image instead of trusting its file size."""

from __future__ import annotations

from typing import Optional

import numpy as np


def assert_png_drawn(path, width_in: Optional[float] = None, height_in: Optional[float] = None,
                     dpi: Optional[int] = None) -> None:
    """``path`` decodes as a PNG (of ``width_in x height_in`` inches at ``dpi`` when given) whose pixels are not one
    flat colour: lines, text and axes drawn give hundreds of distinct anti-aliased colours, a blank figure one."""
    from matplotlib.image import imread

    img = imread(str(path))
    if dpi is not None:
        assert img.shape[:2] == (round(height_in * dpi), round(width_in * dpi)), img.shape
    colours = np.unique((img[..., :3] * 255).round().reshape(-1, 3), axis=0)
    assert len(colours) > 50, f"{path}: {len(colours)} colours (a blank or nearly blank figure)"
