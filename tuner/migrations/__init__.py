"""The study database's migrations (Alembic), shipped with hoptune: one revision per schema change.

``hoptune db upgrade`` applies them; ``hoptune.tuner._revisions`` configures
Alembic in code, so nobody needs an alembic.ini. To change the schema:

1. Change ``tuner/_schema.py``.
2. Add a revision to ``versions/``, numbered after the newest (``0002_…``),
   for instance from Alembic's autogenerate against a database at the newest
   revision (``config`` is ``alembic.config.Config()`` with ``script_location``
   set to this folder and ``config.attributes["connection"]`` an open
   connection; then ``alembic.command.revision(config, message, autogenerate=True,
   rev_id="0002")``), and read what it wrote.
3. Its ``upgrade()`` keeps the rows: change tables with ``op.batch_alter_table``
   (SQLite copies the table; ``render_as_batch`` is on), move data with SQL in
   the revision itself, never through hoptune's code of the day, which changes
   again later. Where ``--sql`` must work on SQLite, give the batch its table
   (``copy_from``), since offline mode cannot read the database.
4. Add its data fixture, ``tests/tuner/fixtures/revisions/<revision>.py``: rows
   to insert at the revision before, and what they must read after; the tests
   require one per revision and check that every earlier row survives.

There are no downgrades: an operator who must go back restores the backup
taken before ``hoptune db upgrade``.
"""
