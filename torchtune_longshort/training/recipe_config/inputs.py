"""The inputs a recipe config names (start checkpoint, tokenizer, training and validation data, a model node's own
checkpoint folder), so that ``overwrite_output_dir=True`` never deletes one of them."""

from __future__ import annotations

from pathlib import Path
from typing import List, Tuple

from torchtune_longshort.training.recipe_config.recipe import RecipeConfig


def input_paths(config: RecipeConfig) -> List[Tuple[str, Path]]:
    """``[(field, path)]`` of every local file or folder the run reads."""
    out: List[Tuple[str, Path]] = []
    for field, value in (("checkpoint_dir", config.checkpoint_dir),
                         ("checkpointer.checkpoint_dir", config.checkpointer.checkpoint_dir),
                         ("tokenizer.path", config.tokenizer.path)):
        if value:
            out.append((field, Path(value).expanduser()))
    model = {"_component_": config.model.component, **config.model.args}
    while isinstance(model, dict):
        if isinstance(model.get("checkpoint_dir"), str):
            out.append(("model.checkpoint_dir", Path(model["checkpoint_dir"]).expanduser()))
        model = model.get("model")
    out += config.dataset.input_files("dataset")
    if config.validation is not None:
        out += config.validation.dataset.input_files("validation.dataset")
    return out


def check_overwrite(config: RecipeConfig) -> None:
    """``overwrite_output_dir=True`` is refused when any input lies inside an existing ``output_dir`` (the folder
    would be deleted with it), naming the field and the path."""
    out = Path(config.output_dir).expanduser()
    if not config.overwrite_output_dir or config.resume or not out.exists():
        return
    real = out.resolve()
    for field, path in input_paths(config):
        p = path.resolve()
        if p == real or real in p.parents:
            raise FileExistsError(
                f"overwrite_output_dir=True refuses to delete output_dir={str(out)!r}: it holds {field}={str(path)!r}, "
                "which this run reads. Move that input out of output_dir, or choose another output_dir")
