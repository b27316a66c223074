"""A resume whose ``dataset.path`` names another place than the run's (its ``local_text`` folder moved, or copied as it
was): ``dataset.path`` is compared exactly, so it was refused as a change of what the run trains, advising the saved
value, which a user whose data moved cannot give. The saved data state keeps each file's digest (size and first MiB,
:func:`~torchtune_longshort.data.file_paths.file_digests`, in the order the run read them): where the new path's
files give the same digests, the resume goes on, the move logged; otherwise the refusal names the check and the way
on (the data back at the saved path)."""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from torchtune_longshort.data.file_paths import file_digests, resolve_files
from torchtune_longshort.data.corpus import TEXT_SUFFIXES
from torchtune_longshort.data.file_kinds import record_suffixes

Change = Tuple[str, Any, Any]


def moved_data(saved: Dict[str, Any], new: Dict[str, Any], data_state: Optional[Dict[str, Any]]
               ) -> Tuple[Dict[str, Any], Optional[Change], Dict[str, str]]:
    """``(new config to compare with saved, the move to apply and log or None, {key: words for its refusal})`` of a
    resume from ``saved`` to ``new`` configs (plain dicts), ``data_state`` the resumed step's (its ``digests``)."""
    old_node, new_node = saved.get("dataset"), new.get("dataset")
    if not (isinstance(old_node, dict) and isinstance(new_node, dict)):
        return new, None, {}
    old_path, new_path = old_node.get("path"), new_node.get("path")
    component = str(new_node.get("_component_", "")).rsplit(".", 1)[-1]
    if old_path == new_path or component != "local_text" or old_node.get("_component_") != new_node.get("_component_"):
        return new, None, {}
    digests = (data_state or {}).get("digests")
    suffixes = [*(new_node.get("suffixes") or TEXT_SUFFIXES), *record_suffixes()]
    unread = None
    try:
        same = digests is not None and file_digests(resolve_files(new_path, suffixes, "dataset.path")) == digests
    except (OSError, ValueError) as e:  # the new path cannot be read: not the run's data
        same, unread = False, " ".join(str(e).split())
    if same:
        return {**new, "dataset": {**new_node, "path": old_path}}, ("dataset.path", old_path, new_path), {}
    note = (f" (it cannot be read to compare with the run's data: {unread}; to resume, put the run's data back at "
            f"{old_path!r})" if unread and digests is not None else
            f" (its files are not those the run read: their sizes and first MiB differ from the digests its data "
            f"state saved; to resume, put the run's data back at {old_path!r})" if digests is not None else
            " (the run's data state holds no digests of its files to compare the new path with: put the run's data "
            f"back at {old_path!r} to resume)")
    return new, None, {"dataset.path": note}
