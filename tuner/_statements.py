"""The study database's statements on every hop's path, built once, run with their values.

Building a statement (``select(hops).where(...)``) costs about 150 microseconds
of Python on a 2-core host, four times what running it on SQLite takes, and a
hop with its epoch's decision runs about twenty of them: a few milliseconds a
hop, as long as a small region's pass trains. These are built once, at import,
with bound parameters; each run passes its values. Their parameters are named
``key_*`` where they pick rows, so they never clash with a column an update
sets from the values it is given (an ``update`` run with values for columns it
does not name sets those too).
"""

from __future__ import annotations

from sqlalchemy import bindparam, select, update

from hoptune.tuner._schema import epochs, hops, studies, trials

__all__ = ["EPOCH", "EPOCHS", "EPOCH_END", "EPOCH_NEW", "EPOCH_ORDER", "HOP", "HOP_DELIVERED",
           "HOP_DONE", "HOP_ID", "HOP_LOCKED", "HOP_NEW", "HOP_SET", "HOP_SET_INTERRUPTED",
           "STUDY", "STUDY_LOCKED", "TRIAL", "TRIAL_SET", "hop_key"]


def hop_key(trial_id: int, epoch: int, position: int) -> dict[str, int]:
    """The values of a hop's key, as the hop statements name them."""
    return {"key_trial": trial_id, "key_epoch": epoch, "key_position": position}


_HOP_KEY = (hops.c.trial_id == bindparam("key_trial"), hops.c.epoch == bindparam("key_epoch"),
            hops.c.position == bindparam("key_position"))

#: A new hop, its columns from the values given (``queue_hop``).
HOP_NEW = hops.insert()
#: A new epoch, its columns from the values given.
EPOCH_NEW = epochs.insert()
#: The study ``key_study``.
STUDY = select(studies).where(studies.c.id == bindparam("key_study"))
#: The same, its row locked until the transaction ends (not on SQLite: it holds the database).
STUDY_LOCKED = STUDY.with_for_update()
#: The trial ``key_trial``.
TRIAL = select(trials).where(trials.c.id == bindparam("key_trial"))
#: The trial ``key_trial``, its columns set from the values given.
TRIAL_SET = update(trials).where(trials.c.id == bindparam("key_trial"))
#: Epoch ``key_epoch`` of trial ``key_trial``.
EPOCH = select(epochs).where(epochs.c.trial_id == bindparam("key_trial"),
                             epochs.c.epoch == bindparam("key_epoch"))
#: The visit order of epoch ``key_epoch`` of trial ``key_trial``.
EPOCH_ORDER = select(epochs.c.visit_order).where(epochs.c.trial_id == bindparam("key_trial"),
                                                 epochs.c.epoch == bindparam("key_epoch"))
#: Every epoch of trial ``key_trial``, in order.
EPOCHS = select(epochs).where(epochs.c.trial_id == bindparam("key_trial")).order_by(epochs.c.epoch)
#: Epoch ``key_epoch`` of trial ``key_trial`` decided, if it was not (``metric``,
#: ``finished_at`` given).
EPOCH_END = update(epochs).where(epochs.c.trial_id == bindparam("key_trial"),
                                 epochs.c.epoch == bindparam("key_epoch"),
                                 epochs.c.finished_at.is_(None))
#: The hop ``hop_key``.
HOP = select(hops).where(*_HOP_KEY)
#: The same, its row locked until the transaction ends (not on SQLite).
HOP_LOCKED = HOP.with_for_update()
#: The id of the hop ``hop_key``, if it is recorded.
HOP_ID = select(hops.c.id).where(*_HOP_KEY)
#: One more delivery of the hop ``hop_key``.
HOP_DELIVERED = update(hops).where(*_HOP_KEY).values(deliveries=hops.c.deliveries + 1)
#: The hop ``hop_key``, its columns set from the values given.
HOP_SET = update(hops).where(*_HOP_KEY)
#: The same, and one more interruption counted.
HOP_SET_INTERRUPTED = HOP_SET.values(interrupted=hops.c.interrupted + 1)
#: The hop ``hop_key`` recorded done (columns from the values given), unless it was.
HOP_DONE = update(hops).where(*_HOP_KEY, hops.c.state != "done")
