"""Alembic's entry point for the study database.

Online, it runs on the connection the caller passes in ``config.attributes``
(already inside the caller's locked transaction); offline (``--sql``), it
writes the statements for the dialect of ``sqlalchemy.url``. Batch mode lets
SQLite, whose ALTER TABLE cannot drop or change a column, copy the table instead.
"""

from __future__ import annotations

from alembic import context

from hoptune.tuner._schema import metadata


def run() -> None:
    config = context.config
    options = {"target_metadata": metadata, "render_as_batch": True, "compare_type": True}
    connection = config.attributes.get("connection")
    if connection is None:
        context.configure(url=config.get_main_option("sqlalchemy.url"), literal_binds=True,
                          **options)
    else:
        context.configure(connection=connection, **options)
    with context.begin_transaction():
        context.run_migrations()


run()
