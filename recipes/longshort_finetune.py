"""Entry point kept for ``PYTHONPATH=. tune run recipes/longshort_finetune.py`` from the repository root.

The recipe lives in the package, so that an installed copy (``pip install .``) runs from any folder:

    tune run torchtune_longshort/recipes/longshort_finetune.py --config configs/tiny/longshort_stdlib.yaml
"""

import sys

from torchtune_longshort.refusals import stopped_while_importing

with stopped_while_importing(__name__, "longshort_finetune"):  # Ctrl-C while it imports: one line, exit 130
    from torchtune_longshort.recipes.longshort_finetune import recipe_main

if __name__ == "__main__":
    sys.exit(recipe_main())
