"""Rebuild the committed study reports (``docs/study/<name>``) from their committed results at two revisions and diff.

``python benchmarks/rebuild_study_reports.py --before aed1b77 [--after REV] [--folders cpu_small ...] [--keep DIR]``

Each folder's committed ``runs/<key>/result.json`` (Table 1: ``cells/<key>/result.json``) is laid out as a study
output folder (``base/``, ``runs/<key>/``; the committed ``summary.json``'s ``wall_s`` as ``study.json``'s
``wall_s_this_invocation``), then ``python -m torchtune_longshort.study[.table1] --config <cfg> [--quick] --out <dir>
--report-only --report-dir <rep> --repo-root <tree>`` runs in a temporary ``git worktree`` of ``--before`` (and of
``--after``; default: this working tree) with ``PYTHONPATH=<tree>``, so that tree's package is imported (checked).
The config and ``--quick`` are read from the committed report's ``Config`` line, ``--note`` from its hand-written
note (a study's lines above the generated body; Table 1's paragraph under the verdict). ``--before-config after`` runs
the old code on the after tree's config file. No training or evaluation runs; nothing under docs/ is written unless
``--write``: then every file the after rebuild wrote at the top of its folder (report.md, summary.json, Table 1's
results.csv, the figures) is copied into ``docs/study/<name>``, and the figures its committed summary.json named that
the rebuild no longer draws are removed (the committed run and cell records stay).

Compared: report.md by ``##`` section (the rebuild's own ``- torchtune-longshort <version>, commit <sha>`` line
masked), summary.json by top-level key (``provenance.project``, the rebuild's own version and commit, ignored),
every PNG by its bytes. Prints one row per folder.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from torchtune_longshort.study.eval_used import GENERATED_LINES

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("cpu_small", "cpu_small_quick", "cpu_medium", "gpu_smollm2", "table1_smollm2")
REBUILD_LINE = re.compile(r"^- torchtune-longshort \S+, commit .*$")  # the rebuild's own provenance


def git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def checkout(rev: Optional[str], tmp: Path) -> Tuple[Path, str]:
    """A worktree of ``rev`` (None: this working tree) and its label; checks that its package is the one imported."""
    root = REPO if rev is None else tmp / f"wt_{rev}"
    if rev is not None:
        git("worktree", "add", "--detach", "--quiet", str(root), rev)
    label = "working tree" if rev is None else f"{rev} ({git('rev-parse', '--short', rev)})"
    where = subprocess.run([sys.executable, "-c", "import torchtune_longshort as t; print(t.__file__)"], cwd=root,
                           env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True, text=True).stdout
    if not Path(where.strip()).resolve().is_relative_to(root.resolve()):
        raise SystemExit(f"{label}: torchtune_longshort imported from {where.strip()!r}, not {root}")
    return root, label


def config_of(folder: str) -> Tuple[str, bool]:
    """The config file and --quick of a committed report, from its ``Config`` line."""
    text = (REPO / "docs/study" / folder / "report.md").read_text()
    m = re.search(r"^Config:? `(configs/study/[^`]+)`( --quick)?", text, re.M)
    if not m:
        raise SystemExit(f"docs/study/{folder}/report.md: no 'Config: `configs/study/...`' line")
    return m.group(1), bool(m.group(2))


def note_of(folder: str) -> str:
    """The committed report's hand-written note (:func:`note_in`)."""
    src = REPO / "docs/study" / folder
    return note_in((src / "report.md").read_text(), table1=(src / "cells").is_dir())


def note_in(text: str, table1: bool = False) -> str:
    """The hand-written note of a report's text, as ``--note`` put it there: a study's lines above the generated
    body (the title and Config line aside); Table 1's paragraph between the verdict's list and the figure."""
    lines = text.splitlines()
    if table1:
        start = next(i for i, x in enumerate(lines) if x.startswith("**Verdict"))
        start = next(i for i in range(start + 2, len(lines)) if not lines[i].startswith("- "))
        stop = next(i for i, x in enumerate(lines) if x.startswith("!["))
        return "\n".join(lines[start:stop]).strip()
    stop = next(i for i, x in enumerate(lines) if x.startswith(("## ", "Cells:", "**The fine-tuning grid")))
    kept = [x for x in lines[1:stop] if not x.startswith(("Config:",) + GENERATED_LINES)]
    return "\n".join(kept).strip()


def write_back(rebuilt: Path, dest: Path) -> Tuple[List[str], List[str]]:
    """Copy every file a rebuild wrote at the top of its folder (report.md, summary.json, Table 1's results.csv,
    the figures) into ``dest``, and remove the figures ``dest``'s committed summary.json names that the rebuild no
    longer draws (as a study's rerun removes them); the run or cell records under ``dest`` stay. Returns (copied,
    removed)."""
    old = json.loads((dest / "summary.json").read_text()) if (dest / "summary.json").is_file() else {}
    named = [p for p in (old.get("plots") or []) + [old.get("figure")] if isinstance(p, str) and "/" not in p]
    copied = sorted(p.name for p in rebuilt.iterdir() if p.is_file())
    for name in copied:
        shutil.copyfile(rebuilt / name, dest / name)
    removed = [n for n in named if n not in copied and (dest / n).is_file()]
    for name in removed:
        (dest / name).unlink()
    return copied, removed


def lay_out(folder: str, out: Path) -> None:
    """The committed results as the output folder a --report-only rebuild reads."""
    src = REPO / "docs/study" / folder
    if (src / "cells").is_dir():  # Table 1: cells/<key>/result.json in both places
        for d in sorted((src / "cells").iterdir()):
            (out / "cells" / d.name).mkdir(parents=True)
            shutil.copy(d / "result.json", out / "cells" / d.name / "result.json")
        return
    for d in sorted((src / "runs").iterdir()):
        dest = out / "base" if d.name == "base" else out / "runs" / d.name
        dest.mkdir(parents=True)
        shutil.copy(d / "result.json", dest / "result.json")
    wall = json.loads((src / "summary.json").read_text()).get("wall_s")
    (out / "study.json").write_text(json.dumps({"wall_s_this_invocation": wall}))


def rebuild(root: Path, folder: str, rep: Path, cfg_from: Path) -> int:
    """--report-only rebuild of ``folder`` by the package in ``root`` (config file from ``cfg_from``) into ``rep``."""
    cfg, quick = config_of(folder)
    if cfg_from != root:
        shutil.copy(cfg_from / cfg, root / cfg)  # only ever a temporary worktree
    out = rep.parent / (rep.name + "_out")
    lay_out(folder, out)
    module = "torchtune_longshort.study" + (".table1" if (out / "cells").is_dir() else "")
    cmd = [sys.executable, "-m", module, "--config", cfg] + (["--quick"] if quick else []) + [
        "--out", str(out), "--report-only", "--report-dir", str(rep), "--repo-root", str(root)]
    cmd += ["--note", note_of(folder)] if note_of(folder) else []  # the study's and Table 1's alike
    p = subprocess.run(cmd, cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True, text=True)
    (rep.parent / (rep.name + ".log")).write_text(" ".join(cmd) + "\n" + p.stdout + p.stderr)
    if cfg_from != root:
        git("checkout", "--quiet", "--", cfg, cwd=root)
    return p.returncode


def sections(md: Path) -> Dict[str, List[str]]:
    """report.md by ``##`` heading (the text before the first one: ``(head)``), the rebuild's commit line masked."""
    out: Dict[str, List[str]] = {"(head)": []}
    cur = "(head)"
    for line in md.read_text().splitlines() if md.is_file() else []:
        if line.startswith("## "):
            cur = line[3:]
            out[cur] = []
        out[cur].append("- (rebuild provenance)" if REBUILD_LINE.match(line) else line)
    return out


def diff_md(a: Path, b: Path) -> List[str]:
    """Headings of the sections that differ: ``+h`` only after, ``-h`` only before, ``~h`` changed."""
    sa, sb = sections(a), sections(b)
    res = [f"-{h}" for h in sa if h not in sb] + [f"+{h}" for h in sb if h not in sa]
    res += [f"~{h}" for h in sa if h in sb and sa[h] != sb[h]]
    if not res and list(sa) != list(sb):
        res = ["(section order)"]
    return res


def diff_json(a: Path, b: Path) -> Tuple[List[str], List[str]]:
    """summary.json's top-level keys: (identical, differing), ``provenance.project`` ignored."""
    ja, jb = (json.loads(p.read_text()) if p.is_file() else {} for p in (a, b))
    for j in (ja, jb):
        (j.get("provenance") or {}).pop("project", None)
    keys = list(dict.fromkeys([*ja, *jb]))
    return [k for k in keys if ja.get(k, ...) == jb.get(k, ...)], [k for k in keys if ja.get(k, ...) != jb.get(k, ...)]


def diff_png(a: Path, b: Path) -> Tuple[int, List[str]]:
    """(how many PNGs are byte-identical, the names that differ or exist on one side only)."""
    names = sorted({p.name for p in a.glob("*.png")} | {p.name for p in b.glob("*.png")})
    same = [n for n in names
            if (a / n).is_file() and (b / n).is_file() and (a / n).read_bytes() == (b / n).read_bytes()]
    return len(same), [n for n in names if n not in same]


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", required=True, help="revision of the old code (a temporary git worktree)")
    p.add_argument("--after", default=None, help="revision of the new code (default: this working tree)")
    p.add_argument("--before-config", choices=("own", "after"), default="own",
                   help="config file the old code reads: its own revision's, or the after tree's")
    p.add_argument("--folders", nargs="+", default=list(FOLDERS), help="docs/study folders (default: all five)")
    p.add_argument("--keep", default=None, help="keep the rebuilds here (<DIR>/<before|after>/<folder>)")
    p.add_argument("--write", action="store_true", help="copy the after rebuild's report.md, summary.json, "
                   "results.csv (Table 1) and figures into docs/study/<folder>, removing the figures its committed "
                   "summary.json named that the rebuild no longer draws (the committed results stay)")
    a = p.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="rebuild_study_"))
    keep = Path(a.keep) if a.keep else tmp / "rebuilt"
    trees: List[Path] = []
    rebuilt: List[Tuple[str, Path]] = []
    try:
        (rb, lb), (ra, la) = checkout(a.before, tmp), checkout(a.after, tmp)
        trees = [t for t in (rb, ra) if t != REPO]
        print(f"before: {lb}, config: {a.before_config}; after: {la}; rebuilds in {keep}\n")
        print("| folder | exit before/after | report.md | summary.json identical keys | differing keys | figures |")
        print("|---|---|---|---|---|---|")
        for f in a.folders:
            rc = [rebuild(r, f, keep / side / f, ra if side == "before" and a.before_config == "after" else r)
                  for side, r in (("before", rb), ("after", ra))]
            bd, ad = keep / "before" / f, keep / "after" / f
            if not ((bd / "report.md").is_file() and (ad / "report.md").is_file()):
                print(f"| {f} | {rc[0]}/{rc[1]} | no report to compare: see {keep}/<side>/{f}.log | | | |")
                continue
            md = diff_md(bd / "report.md", ad / "report.md")
            same, differ = diff_json(bd / "summary.json", ad / "summary.json")
            n_same, figs = diff_png(bd, ad)
            print(f"| {f} | {rc[0]}/{rc[1]} | {'identical' if not md else '; '.join(md)} | {', '.join(same)} | "
                  f"{', '.join(differ) or '-'} | {n_same} identical" + (f"; differ: {', '.join(figs)}" if figs else "")
                  + " |")
            rebuilt.append((f, ad))
        if a.write and rebuilt:
            print()
        for f, ad in rebuilt if a.write else []:  # after every rebuild: a rebuild reads the tree (its commit, clean)
            copied, removed = write_back(ad, REPO / "docs/study" / f)
            print(f"docs/study/{f}: wrote {', '.join(copied)}"
                  + (f"; removed {', '.join(removed)} (no longer drawn)" if removed else ""))
    finally:
        for t in trees:
            git("worktree", "remove", "--force", str(t))
        shutil.rmtree(tmp, ignore_errors=True)  # --keep lies outside it
    return 0


if __name__ == "__main__":
    sys.exit(main())
