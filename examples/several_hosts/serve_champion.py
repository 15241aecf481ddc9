"""Serve a region's champion on a host that never trained: only the store is needed.

    python serve_champion.py REGION [USER ITEM]...

With ``HOPTUNE_STORE_URL`` (and the store's credentials) set, it loads the
champion of REGION from the store and prints one JSON line: the version and
the predicted rating of each (user, item) pair (default: the pair u0, i0).
"""

from __future__ import annotations

import json
import sys

import hoptune


def main(argv: list[str]) -> int:
    region, rest = argv[0], argv[1:]
    pairs = list(zip(rest[::2], rest[1::2], strict=True)) or [("u0", "i0")]
    champion = hoptune.load_champion(region)
    rows = {"user_id": [u for u, _ in pairs], "item_id": [i for _, i in pairs]}
    predictions = [float(p) for p in champion.predict(rows)]
    print(json.dumps({"region": region, "version": champion.version,
                      "predictions": predictions}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
