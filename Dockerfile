# caseshelf serve on the embedded store: the local API and the web UI, the store on a volume.
#
#   docker build -t caseshelf .
#   docker run -p 8000:8000 -v caseshelf-data:/data caseshelf
#
# The server binds 0.0.0.0 inside the container, so it asks for a token: it prints one at start
# (or set CASESHELF_SERVE_TOKEN). docs/operations.md has the details.

FROM python:3.12-slim AS build
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY shared ./shared
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:3.12-slim
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/caseshelf-*.whl && rm -rf /wheels \
    && useradd --create-home --uid 10001 caseshelf \
    && mkdir /data && chown caseshelf /data
ENV CASESHELF_HOME=/data \
    PYTHONUNBUFFERED=1
VOLUME ["/data"]
USER caseshelf
EXPOSE 8000
CMD ["caseshelf", "serve", "--host", "0.0.0.0", "--port", "8000"]
