"""The configuration the Celery-side tests write, and the liveness bounds their workers run with."""

CONFIG = """
[defaults]
shards = {shards}
epochs = {epochs}
batch_size = {batch_size}
seed = 3
validation_fraction = 0.2
optimizer = "fused_adamw"
trials = {trials}
parallel = {parallel}
max_redeliveries = 2
[defaults.params]
embedding_dim = 8
lr = 0.02
reg = 0.0001
[defaults.space]
lr = {{ type = "real", low = 0.001, high = 0.3, prior = "log" }}
embedding_dim = {{ type = "int", low = 4, high = 16 }}
[defaults.pruner]
reduction_factor = 2
min_epochs = 1
"""

REGION = """
[regions.{name}]
data = "data/{name}.csv"
family = "rating_mf"
task = "rating"
columns = {{ user = "user_id", item = "item_id", rating = "rating" }}
rating_range = [1.0, 5.0]
"""


#: Liveness bounds of seconds, not minutes, for tests that kill workers.
FAST_LIVENESS = {"HOPTUNE_HEARTBEAT_SECONDS": "0.5", "HOPTUNE_LIVENESS_SECONDS": "4",
                 "HOPTUNE_SWEEP_SECONDS": "1", "HOPTUNE_RESEND_SECONDS": "3",
                 "HOPTUNE_TAKEOVER_SECONDS": "4"}
