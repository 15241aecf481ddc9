"""The tuner: search spaces, batch proposals from scikit-optimize, warm starts, ASHA pruning,
and the study database.

Names load on first use: scikit-optimize is slow to import, and the command
line should not pay for it on every call.
"""

from __future__ import annotations

from regions._lazy import lazy_names

_NAMES = {
    "AshaPruner": "tuner._pruner",
    "CategoricalDim": "tuner._space",
    "Dimension": "tuner._space",
    "IntDim": "tuner._space",
    "RealDim": "tuner._space",
    "Space": "tuner._space",
    "parse_space": "tuner._space",
    "default_initial_points": "tuner._optimizer",
    "propose": "tuner._optimizer",
    "select_prior": "tuner._warmstart",
    "StudyDB": "tuner._db",
    "write_report": "tuner._report",
}

__all__ = list(_NAMES)

__getattr__, __dir__ = lazy_names(__name__, _NAMES, globals())
