"""hoptune: nightly hyperparameter tuning and retraining per region, by model hopping.

The public Python API. Its packages are ``hoptune.core`` (the ground floor:
errors, settings, the store), ``hoptune.kernels`` (fused optimizer kernels),
``hoptune.regions`` (configuration, data, model families), ``hoptune.tuner``
(search spaces, the optimizer, the study database, the registry) and
``hoptune.tasks`` (the Celery app, the hop, the workflow and the command line).
"""

from __future__ import annotations

from pathlib import Path as _Path

# Used from a checkout rather than installed (``PYTHONPATH=checkout``, as on a GPU
# machine without network), the packages' folders stand beside this one: find them
# there. Installed, setup.cfg's package_dir puts them inside this package instead.
_checkout = _Path(__file__).resolve().parent.parent
if (_checkout / "setup.cfg").is_file() and (_checkout / "tasks" / "cli.py").is_file():
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

__all__ = [
    "ConfigError",
    "DataError",
    "HoptuneError",
    "SchemaError",
    "Settings",
    "StoreError",
    "StudyError",
    "__version__",
]

__version__ = "0.1.0"
