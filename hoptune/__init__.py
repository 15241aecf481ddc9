"""hoptune: nightly hyperparameter tuning and retraining per region, by model hopping.

The public Python API. Its packages are ``hoptune.core`` (the ground floor:
errors, settings, the store), ``hoptune.kernels`` (fused optimizer kernels),
``hoptune.regions`` (configuration, data, model families), ``hoptune.tuner``
(search spaces, the optimizer, the study database, the registry) and
``hoptune.tasks`` (the Celery app, the hop, the workflow and the command line).
"""

from __future__ import annotations

from pathlib import Path as _Path
from typing import TYPE_CHECKING

# Used from a checkout rather than installed (``PYTHONPATH=checkout``, as on a GPU
# machine without network), the packages' folders stand beside this one: find them
# there. Installed, setup.cfg's package_dir puts them inside this package instead.
_checkout = _Path(__file__).resolve().parent.parent
if (_checkout / "setup.cfg").is_file() and (_checkout / "tasks" / "__init__.py").is_file():
    __path__.append(str(_checkout))  # noqa: F821 - a package's own __path__

from hoptune.core import (  # noqa: E402 - after the path it may need
    ConfigError,
    DataError,
    HoptuneError,
    SchemaError,
    Settings,
    StoreError,
    StudyError,
)

if TYPE_CHECKING:
    from hoptune.tuner import Predictor

__all__ = [
    "ConfigError",
    "load_champion",
    "load_exported",
    "load_version",
    "DataError",
    "HoptuneError",
    "SchemaError",
    "Settings",
    "StoreError",
    "StudyError",
    "__version__",
]

__version__ = "0.1.0"


def load_champion(region: str, settings: Settings | None = None) -> Predictor:
    """The champion of ``region`` as a predictor of raw rows (``hoptune.tuner.Predictor``).

    ``predictor.predict(rows)`` takes a DataFrame, a list of dicts or a dict of
    lists with the region's column names, applies the stored id maps and
    feature scaling (an id never seen gets the model's fallback) and returns
    one prediction per row. The store is ``settings``' (default: the environment's).
    """
    return load_version(region, None, settings)


def load_version(region: str, version: str | None, settings: Settings | None = None
                 ) -> Predictor:
    """Version ``version`` (``"v0003"``; None: the champion) of ``region`` as a predictor."""
    from hoptune.core import Store
    from hoptune.tuner import load_predictor

    settings = settings or Settings.from_env()
    return load_predictor(Store(settings.store_url), region, version)



def load_exported(folder: str | _Path) -> Predictor:
    """The predictor ``hoptune export REGION --out FOLDER`` wrote, from that folder alone."""
    from hoptune.core import Store
    from hoptune.tuner import read_predictor

    return read_predictor(Store(str(_Path(folder).absolute())))
