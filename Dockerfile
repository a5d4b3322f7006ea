# One image for every evidence-store service; the command picks the service
# (`evidence writer`, `evidence projector`, `evidence api`, `evidence topics ensure`), and
# docker-compose.yml's one-shot init runs ops/compose_init.py from it.
#
# Stage 1 builds the compiled paths as wheels, as native/*/build.sh builds them for `make up`
# (each crate with maturin from PyPI and the crates pinned by its Cargo.lock; pip here, in an
# empty build venv, where build.sh uses the project virtualenv's uv):
# native/seal, the writer's seal path, and native/rows, the projector's row path. Stage 2
# installs them, and refuses to build an image whose compiled paths do not import or do not
# agree with the contract, so a Docker deployment seals and decodes as fast as `make up`.
FROM rust:1.95-slim-bookworm AS native
# Debian's python3 (3.11 on bookworm) to run pip and maturin, taken by name, as devstack and
# native/toolchain.sh take their Debian packages; it builds the wheels and is left behind.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv /opt/build
WORKDIR /src
COPY native/ native/
RUN /opt/build/bin/pip wheel --no-cache-dir --no-deps --wheel-dir /wheels \
    ./native/seal ./native/rows

FROM python:3.11-slim-bookworm
WORKDIR /app
COPY . .
COPY --from=native /wheels /wheels
RUN pip install --no-cache-dir -c constraints.txt './packaging/contract[tlog]' \
    ./packaging/client . /wheels/*.whl \
 && EVIDENCE_NATIVE=1 python -c "import projections.fastrows, writer.native; writer.native.select()"
# The compiled paths or none: a module that went missing or is refused stops the service
# with the reason instead of running on the pure paths, several times slower. Each service
# says which it runs when it starts (the writer's native_seal, the projector's row_path).
ENV EVIDENCE_NATIVE=1
# nobody:nogroup; the files init makes for the services are given to this user.
USER 65534:65534
ENTRYPOINT ["evidence"]
