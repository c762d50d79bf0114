# The checkworthy worker image (also runs the migrations, as the one-shot `migrate` service).
# Same install order as scripts/setup.sh: torch's CPU build first, so nothing pulls CUDA wheels,
# then the pinned requirements, then the package. data/ is checked out of the in-repo DVC
# remote (dvcstore/); .dockerignore lets in only what the image needs (no .env, no .venv).
FROM python:3.11-slim-bookworm

ARG TORCH_VERSION=2.13.0
# the git revision recorded with every run (no .git inside the image): --build-arg CHECKWORTHY_CODE_REV=$(git rev-parse HEAD);
# without it runs record the package version marked -no-git (checkworthy-0.1.0-no-git), never a blank
ARG CHECKWORTHY_CODE_REV=""
ENV CHECKWORTHY_CODE_REV=${CHECKWORTHY_CODE_REV}
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    CHECKWORTHY_ROOT=/app \
    CHECKWORTHY_VAR=/var/lib/checkworthy \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    HF_HUB_DISABLE_TELEMETRY=1 \
    TOKENIZERS_PARALLELISM=false \
    PREFECT_SERVER_ANALYTICS_ENABLED=false \
    DO_NOT_TRACK=1 \
    DVC_NO_ANALYTICS=1

WORKDIR /app

# dependencies first: this layer is rebuilt only when requirements/ changes
COPY requirements/ requirements/
RUN pip install "torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX_URL}" \
 && pip install -r requirements/base.txt

COPY . .
RUN dvc config --local core.no_scm true \
 && dvc pull -q data.dvc models/classifier/minilm-lora.dvc models/classifier/gemma-lora.dvc \
    models/classifier/minilm-student.dvc \
 && pip install --no-deps -e .

# an unprivileged user; /app is its working copy: the flows version new label files with DVC
# (data/, data.dvc, .dvc/, dvcstore/) and write reports/ and var/
RUN useradd --system --create-home --uid 10001 checkworthy \
 && mkdir -p /var/lib/checkworthy /app/reports /app/var /app/data/labels /app/data/incoming \
 && chown -R checkworthy:checkworthy /app /var/lib/checkworthy
USER checkworthy

# the compose file runs `python -m checkworthy.store.audit bootstrap` (migrate) or the Prefect worker
CMD ["python", "-m", "checkworthy.store.audit", "bootstrap"]
