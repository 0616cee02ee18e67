"""rollout-cli's own processes never import pandas: `pa.array` imports it, where it is
installed, to check its argument for pandas types (about 0.3 s), and nothing here handles a
pandas object. The executable and the local pool's workers refuse it; the process of a library
caller (a trainer, a notebook) is left as it is."""
from __future__ import annotations

import sys


class NoPandas:
    """Import finder that refuses pandas (pyarrow then works as where it is not installed)."""

    def find_spec(self, name, path=None, target=None):
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError("pandas is not used by rollout-cli's own processes", name=name)
        return None


def refuse_pandas() -> None:
    """Refuse pandas in this process from now on, unless it is imported already."""
    if "pandas" not in sys.modules and not any(isinstance(f, NoPandas) for f in sys.meta_path):
        sys.meta_path.insert(0, NoPandas())
