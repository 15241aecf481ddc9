from __future__ import annotations

import zlib

import pydantic
import pytest

from hoptune.core import ConfigError
from hoptune.regions import Pruner, RatingColumns, RegionConfig, TabularColumns, load_config

EXAMPLE = """\
[defaults]
shards = 2
epochs = 3
batch_size = 256
seed = 0
validation_fraction = 0.2
optimizer = "fused_adamw"
trials = 16
parallel = 4
max_redeliveries = 3
[defaults.params]
lr = 0.01
[defaults.space]
lr = { type = "real", low = 1e-3, high = 0.3, prior = "log" }
[defaults.pruner]
reduction_factor = 3
min_epochs = 1
[schedule]
cron = "0 2 * * *"
timezone = "UTC"

[regions.north]
data = "data/north.csv"
family = "rating_mf"
task = "rating"
columns = { user = "user_id", item = "item_id", rating = "rating" }
rating_range = [1.0, 5.0]
shards = 2
[regions.north.params]
embedding_dim = 16
[regions.west]
data = "data/west.parquet"
family = "mlp"
task = "classification"
columns = { features = ["f0", "f1"], label = "label" }
"""

MINIMAL = """\
[regions.north]
data = "north.csv"
family = "rating_mf"
rating_range = [1, 5]
"""


def test_example_loads_with_defaults_merged(write_config, workdir):
    config = load_config(write_config(EXAMPLE))
    assert config.path == workdir / "hoptune.toml"
    assert (config.schedule.cron, config.schedule.timezone) == ("0 2 * * *", "UTC")
    north, west = config.region("north"), config.region("west")
    assert north.data == workdir / "data" / "north.csv"
    assert (north.format, west.format) == ("csv", "parquet")
    assert north.columns == RatingColumns(user="user_id", item="item_id", rating="rating")
    assert north.rating_range == (1.0, 5.0)
    assert north.params == {"lr": 0.01, "embedding_dim": 16}
    assert west.params == {"lr": 0.01}
    assert north.space == {"lr": {"type": "real", "low": 1e-3, "high": 0.3, "prior": "log"}}
    assert north.pruner == Pruner(reduction_factor=3, min_epochs=1)
    assert west.columns == TabularColumns(features=("f0", "f1"), label="label")
    assert west.rating_range is None
    assert (west.shards, west.epochs, west.batch_size, west.optimizer) == (2, 3, 256, "fused_adamw")


def test_built_in_defaults_apply_without_a_defaults_table(write_config):
    region = load_config(write_config(MINIMAL)).region("north")
    assert region.task == "rating"
    assert region.columns == RatingColumns(user="user_id", item="item_id", rating="rating")
    # no seed anywhere: the region's own, from its name (``region_seed``)
    assert (region.shards, region.epochs, region.seed, region.trials) == (
        "auto", 3, 1546268866, 16)
    assert region.params == {} and region.space == {}


def test_each_region_without_a_seed_gets_its_own_and_a_set_one_is_kept(write_config):
    two = MINIMAL + MINIMAL.replace("north", "south")
    regions = load_config(write_config(two)).regions
    seeds = {name: region.seed for name, region in regions.items()}
    assert seeds["north"] != seeds["south"] and all(0 <= s < 2**31 for s in seeds.values())
    # stable across runs and processes: the name's CRC-32
    assert seeds == {name: r.seed for name, r in load_config(write_config(two)).regions.items()}
    assert seeds["north"] == zlib.crc32(b"north") % 2**31
    explicit = load_config(write_config(two.replace('rating_range = [1, 5]\n',
                                                    'rating_range = [1, 5]\nseed = 7\n', 1)))
    assert (explicit.region("north").seed, explicit.region("south").seed) == (7, seeds["south"])
    inherited = load_config(write_config("[defaults]\nseed = 0\n" + two)).regions
    assert {r.seed for r in inherited.values()} == {0}


def test_an_unknown_region_names_the_closest_known_one(write_config):
    config = load_config(write_config(MINIMAL))
    with pytest.raises(ConfigError) as caught:
        config.region("nroth")
    assert str(caught.value) == "hoptune.toml: no region 'nroth' (did you mean 'north'?) " \
                                "(known: north)"


def test_region_tables_merge_over_defaults(write_config):
    text = (
        EXAMPLE
        + """
[regions.north.space]
lr = { type = "real", low = 0.01, high = 0.1 }
reg = { type = "real", low = 1e-5, high = 0.1, prior = "log" }
[regions.north.pruner]
min_epochs = 2
"""
    )
    config = load_config(write_config(text))
    north = config.region("north")
    assert north.space == {
        "lr": {"type": "real", "low": 0.01, "high": 0.1},
        "reg": {"type": "real", "low": 1e-5, "high": 0.1, "prior": "log"},
    }
    assert north.pruner == Pruner(reduction_factor=3, min_epochs=2)
    assert config.region("west").space == {
        "lr": {"type": "real", "low": 1e-3, "high": 0.3, "prior": "log"}
    }


def test_regions_are_frozen_and_own_their_tables(write_config):
    config = load_config(write_config(EXAMPLE))
    north = config.region("north")
    with pytest.raises(pydantic.ValidationError):
        north.shards = 3
    north.space["lr"]["low"] = 0.5
    assert config.region("west").space["lr"]["low"] == 1e-3


def test_region_round_trips_through_json(write_config):
    for region in load_config(write_config(EXAMPLE)).regions.values():
        assert RegionConfig.model_validate(region.model_dump(mode="json")) == region


def test_unknown_region_lists_the_known_ones(write_config):
    config = load_config(write_config(EXAMPLE))
    with pytest.raises(ConfigError) as caught:
        config.region("south")
    assert str(caught.value) == "hoptune.toml: no region 'south' (known: north, west)"


BAD = [
    (
        "shards = 2\n[regions.north.params]",
        "shards = 0\n[regions.north.params]",
        "regions.north.shards: must be an integer >= 1 or 'auto', got 0",
    ),
    (
        "shards = 2\n[regions.north.params]",
        "shard = 2\n[regions.north.params]",
        "regions.north: unknown field 'shard' (did you mean 'shards'?)",
    ),
    ("epochs = 3", "epochs = 3.5", "defaults.epochs: must be an integer >= 1, got 3.5"),
    ("seed = 0", "seed = true", "defaults.seed: must be an integer >= 0, got true"),
    (
        "batch_size = 256",
        'batch_size = "256"',
        "defaults.batch_size: must be an integer >= 1 or 'auto', got '256'",
    ),
    (
        "validation_fraction = 0.2",
        "validation_fraction = 1",
        "defaults.validation_fraction: must be a number > 0 and < 1, got 1",
    ),
    (
        'optimizer = "fused_adamw"',
        'optimizer = "adam"',
        "defaults.optimizer: must be one of fused_adamw, fused_sgd, adamw, sgd, got 'adam'",
    ),
    ("parallel = 4", "parallel = 4\nfuse = 0",
     "defaults.fuse: must be an integer from 1 to 64 or 'auto', got 0"),
    ("parallel = 4", "parallel = 4\nfuse = 65",
     "defaults.fuse: must be an integer from 1 to 64 or 'auto', got 65"),
    ("parallel = 4", 'parallel = 4\nfuse = "8"',
     "defaults.fuse: must be an integer from 1 to 64 or 'auto', got '8'"),
    ("parallel = 4", 'parallel = 4\nfuse = "many"',
     "defaults.fuse: must be an integer from 1 to 64 or 'auto', got 'many'"),
    (
        "max_redeliveries = 3",
        "max_redeliveries = -1",
        "defaults.max_redeliveries: must be an integer >= 0, got -1",
    ),
    (
        "reduction_factor = 3",
        "reduction_factor = 1",
        "defaults.pruner.reduction_factor: must be an integer >= 2, got 1",
    ),
    (
        "min_epochs = 1",
        "min_epochs = 1\nbrackets = 0",
        "defaults.pruner.brackets: must be an integer >= 1, got 0",
    ),
    (
        "min_epochs = 1",
        "min_epoch = 1",
        "defaults.pruner: unknown field 'min_epoch' (did you mean 'min_epochs'?)",
    ),
    (
        "lr = 0.01",
        "lr = [0.01]",
        "defaults.params.lr: must be a number, string or boolean, got [0.01]",
    ),
    (
        'lr = { type = "real", low = 1e-3, high = 0.3, prior = "log" }',
        "lr = 0.1",
        "defaults.space.lr: must be a table such as { type = ... }, got 0.1",
    ),
    (
        "embedding_dim = 16",
        "embedding_dim = { size = 16 }",
        "regions.north.params.embedding_dim: must be a number, string or boolean, "
        "got { size = 16 }",
    ),
    (
        'cron = "0 2 * * *"',
        'cron = "0 2 * *"',
        "schedule.cron: must be a cron expression of 5 fields, got '0 2 * *'",
    ),
    (
        'timezone = "UTC"',
        'timezone = "Mars/Olympus"',
        "schedule.timezone: must be a time zone name such as 'UTC' or 'Europe/Berlin', "
        "got 'Mars/Olympus'",
    ),
    ("[schedule]", "[schedules]", "unknown field 'schedules' (did you mean 'schedule'?)"),
    (
        "[regions.west]",
        "[regions.West]",
        "regions.West: region names must match [a-z0-9_-]+, got 'West'",
    ),
    (
        'data = "data/north.csv"',
        'data = "data/north.txt"',
        "regions.north.data: must be a path ending in .csv or .parquet, got 'data/north.txt'",
    ),
    ('data = "data/north.csv"', "", "regions.north: missing field 'data'"),
    (
        'family = "mlp"',
        'family = "my models"',
        "regions.west.family: must be 'rating_mf', 'mlp' or 'package.module:function', "
        "got 'my models'",
    ),
    (
        'task = "classification"',
        'task = "ranking"',
        "regions.west.task: must be one of rating, regression, classification, got 'ranking'",
    ),
    ('task = "classification"', "", "regions.west: missing field 'task'"),
    (
        'task = "rating"',
        'task = "regression"',
        "regions.north.task: family 'rating_mf' needs task 'rating', got 'regression'",
    ),
    (
        'task = "classification"',
        'task = "rating"\nrating_range = [0, 1]',
        "regions.west.task: family 'mlp' needs task 'regression' or 'classification', got 'rating'",
    ),
    (
        "rating_range = [1.0, 5.0]",
        "rating_range = [5.0, 1.0]",
        "regions.north.rating_range: must be two numbers [low, high] with low < high, "
        "got [5.0, 1.0]",
    ),
    (
        "rating_range = [1.0, 5.0]",
        'rating_range = [1.0, "5"]',
        "regions.north.rating_range: must be two numbers [low, high] with low < high, "
        "got [1.0, '5']",
    ),
    ("rating_range = [1.0, 5.0]", "", "regions.north.rating_range: required for task 'rating'"),
    (
        'task = "classification"',
        'task = "classification"\nrating_range = [0, 1]',
        "regions.west.rating_range: only for task 'rating'",
    ),
    (
        'columns = { user = "user_id", item = "item_id", rating = "rating" }',
        'columns = { user = "user_id", itme = "item_id" }',
        "regions.north.columns: unknown field 'itme' (did you mean 'item'?)",
    ),
    (
        'columns = { user = "user_id", item = "item_id", rating = "rating" }',
        'columns = { user = "id", item = "id" }',
        "regions.north.columns: column 'id' is named twice",
    ),
    (
        'columns = { features = ["f0", "f1"], label = "label" }',
        'columns = { features = [], label = "label" }',
        "regions.west.columns.features: must be a list of one or more column names, got []",
    ),
    (
        'columns = { features = ["f0", "f1"], label = "label" }',
        'columns = { features = ["f0", 1] , label = "label" }',
        "regions.west.columns.features: must be a list of one or more column names, got ['f0', 1]",
    ),
    (
        'columns = { features = ["f0", "f1"], label = "label" }',
        'columns = { features = ["f0"] }',
        "regions.west.columns: missing field 'label'",
    ),
    (
        'columns = { features = ["f0", "f1"], label = "label" }',
        'columns = "f0"',
        "regions.west.columns: must be a table of column names, got 'f0'",
    ),
    (
        'columns = { features = ["f0", "f1"], label = "label" }',
        'columns = { user = "u" }',
        "regions.west.columns: task 'classification' needs columns { features, label }",
    ),
    (
        'columns = { user = "user_id", item = "item_id", rating = "rating" }',
        'columns = { features = ["f0"], label = "y" }',
        "regions.north.columns: task 'rating' needs columns { user, item, rating }",
    ),
    ("epochs = 3", "epochs = = 3", "line 3: Invalid value (column 10)"),
]


@pytest.mark.parametrize(("old", "new", "message"), BAD, ids=[m for _, _, m in BAD])
def test_bad_configuration_is_one_line_naming_file_field_and_value(write_config, old, new, message):
    assert EXAMPLE.count(old) == 1
    with pytest.raises(ConfigError) as caught:
        load_config(write_config(EXAMPLE.replace(old, new)))
    assert str(caught.value) == f"hoptune.toml: {message}"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[defaults]\nshards = 2\n", "hoptune.toml: missing table [regions]"),
        ("[regions]\n", "hoptune.toml: regions: at least one [regions.NAME] table is required"),
        ("regions = 3\n", "hoptune.toml: regions: must be a table, got 3"),
        ("[regions]\nnorth = 3\n", "hoptune.toml: regions.north: must be a table, got 3"),
        ("defaults = []\n", "hoptune.toml: defaults: must be a table, got []"),
        ('x = "unterminated\n', "hoptune.toml: line 1: Illegal character '\\n' (column 18)"),
    ],
)
def test_bad_file_structure(write_config, text, message):
    with pytest.raises(ConfigError) as caught:
        load_config(write_config(text))
    assert str(caught.value) == message


def test_missing_file_folder_and_non_utf8(workdir):
    (workdir / "folder.toml").mkdir()
    (workdir / "latin1.toml").write_bytes(b"# caf\xe9\n")
    cases = {
        "nope.toml": "nope.toml: no such file",
        "folder.toml": "folder.toml: is a folder, not a file",
        "latin1.toml": "latin1.toml: not UTF-8 text (byte 5)",
    }
    for name, message in cases.items():
        with pytest.raises(ConfigError) as caught:
            load_config(name)
        assert str(caught.value) == message


def test_file_outside_the_working_folder_is_named_in_full(tmp_path_factory, workdir):
    elsewhere = tmp_path_factory.mktemp("elsewhere") / "hoptune.toml"
    elsewhere.write_text(EXAMPLE.replace("shards = 2\n[regions", "shards = -1\n[regions"))
    with pytest.raises(ConfigError) as caught:
        load_config(elsewhere)
    assert str(caught.value) == (
        f"{elsewhere}: regions.north.shards: must be an integer >= 1 or 'auto', got -1"
    )


INHERITING = """\
[defaults]
family = "rating_mf"
task = "rating"
columns = { user = "who", item = "what", rating = "stars" }
rating_range = [1.0, 5.0]
select = "last"
[regions.north]
data = "north.csv"
[regions.south]
data = "south.csv"
columns = { user = "u", item = "i", rating = "r" }
"""


def test_every_region_field_may_stand_in_defaults(write_config, workdir):
    config = load_config(write_config(INHERITING))
    north, south = config.region("north"), config.region("south")
    assert (north.family, north.task, north.rating_range, north.select) == (
        "rating_mf", "rating", (1.0, 5.0), "last")
    assert north.columns == RatingColumns(user="who", item="what", rating="stars")
    assert south.columns == RatingColumns(user="u", item="i", rating="r")
    assert south.data == workdir / "south.csv"


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('family = "rating_mf"', 'family = "no good"',
         "defaults.family: must be 'rating_mf', 'mlp' or 'package.module:function', "
         "got 'no good'"),
        ("rating_range = [1.0, 5.0]", "rating_range = [5.0, 1.0]",
         "defaults.rating_range: must be two numbers [low, high] with low < high, got [5.0, 1.0]"),
        ('select = "last"', 'select = "first"',
         "defaults.select: must be 'best' or 'last', got 'first'"),
    ],
)
def test_a_bad_inherited_field_is_named_where_it_stands(write_config, old, new, message):
    with pytest.raises(ConfigError) as caught:
        load_config(write_config(INHERITING.replace(old, new)))
    assert str(caught.value) == f"hoptune.toml: {message}"
