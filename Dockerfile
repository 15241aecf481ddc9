# hoptune's image: the workers, beat, Flower and one-shot commands of docker-compose.yml.
#
# setup.cfg pins torch==2.13.0; which build of it pip installs depends on the index, and the
# CPU-only build (what development uses) would leave the GPUs idle. A GPU image must install a
# CUDA build of that same version, from the PyTorch index of a CUDA version the hosts' driver
# supports: set TORCH_INDEX_URL in .env (docker-compose.yml passes it here), e.g.
#   TORCH_INDEX_URL=https://download.pytorch.org/whl/cu126
# The `gpu` extra adds CuPy for CUDA 12, for the fused kernels; with a torch built for CUDA 13,
# set GPU_EXTRA=gpu-cuda13 (CuPy for CUDA 13): CuPy must match torch's CUDA.
FROM python:3.11-slim

ARG TORCH_INDEX_URL=""
ARG GPU_EXTRA=gpu

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HOPTUNE_HOME=/var/lib/hoptune

WORKDIR /opt/hoptune
COPY pyproject.toml setup.cfg README.md ./
COPY hoptune ./hoptune
COPY core ./core
COPY tasks ./tasks
COPY kernels ./kernels
COPY tuner ./tuner
COPY regions ./regions

# The torch version comes from setup.cfg, so the CUDA build cannot drift from the pin.
RUN set -eu; \
    if [ -n "$TORCH_INDEX_URL" ]; then \
        torch_version="$(sed -n 's/^ *torch==\([^ ]*\) *$/\1/p' setup.cfg)"; \
        pip install --index-url "$TORCH_INDEX_URL" "torch==${torch_version}"; \
    fi; \
    pip install ".[${GPU_EXTRA}]"; \
    useradd --create-home --uid 1000 hoptune; \
    mkdir -p /srv/hoptune/store /var/lib/hoptune/beat; \
    chown -R hoptune:hoptune /srv/hoptune /var/lib/hoptune

USER hoptune
WORKDIR /var/lib/hoptune
CMD ["hoptune", "--help"]
