"""``python -m torchtune_longshort.eval.report``: see :mod:`torchtune_longshort.eval.report.build`."""

from torchtune_longshort.eval.report.build import main

if __name__ == "__main__":
    main()
