"""Entry point kept for ``PYTHONPATH=. tune run recipes/longshort_finetune.py`` from the repository root.

The recipe lives in the package, so that an installed copy (``pip install .``) runs from any folder:

    tune run torchtune_longshort/recipes/longshort_finetune.py --config configs/tiny/longshort_stdlib.yaml
"""

import sys

from torchtune_longshort.recipes.longshort_finetune import recipe_main

if __name__ == "__main__":
    sys.exit(recipe_main())
