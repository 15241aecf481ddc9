"""``python -m hoptune.tasks.cli``: the ``hoptune`` command, as local workers start it."""

from hoptune.tasks.cli import run

run()
