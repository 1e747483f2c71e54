# memhoncho: workers, beat, Flower and the status server all run this image (compose.yaml).
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    MEMHONCHO_DATA_DIR=/var/lib/memhoncho \
    MEMHONCHO_CONFIG_DIR=/etc/memhoncho

WORKDIR /app
COPY pyproject.toml README.md LICENSE ./
COPY memhoncho ./memhoncho
RUN pip install ".[flower,postgres]"

# An unprivileged user owns the data dir; the shared volume inherits its ownership.
RUN useradd --system --uid 10001 --home-dir /var/lib/memhoncho memhoncho \
    && mkdir -p /var/lib/memhoncho /etc/memhoncho \
    && chown memhoncho:memhoncho /var/lib/memhoncho /etc/memhoncho
USER memhoncho
VOLUME ["/var/lib/memhoncho"]

CMD ["memhoncho", "--help"]
