# syntax=docker/dockerfile:1
# The floodgate binary in a distroless image, running as a non-root user (docs/deploy.md):
#
#   docker build --build-arg FLOODGATE_GIT_COMMIT="$(git rev-parse --short=12 HEAD)" -t floodgate:0.1.0 .
#   docker run --rm -p 8080:8080 -p 8081:8081 -e FLOODGATE_ADMIN_TOKEN="$(openssl rand -hex 32)" \
#     -v "$PWD/crates/floodgate-config/src/example.yaml:/etc/floodgate/floodgate.yaml:ro" floodgate:0.1.0
#
# .dockerignore leaves .git out of the build context, so the commit `floodgate --version` prints
# comes from FLOODGATE_GIT_COMMIT ("unknown" without it).

# === build ===
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
# The commit to embed (hexadecimal), read by crates/floodgate-server/build.rs.
ARG FLOODGATE_GIT_COMMIT=""
COPY . .
# Cache mounts keep the crate registry and the build directory between builds; the binary is
# copied out of the cached directory so that the next stage can take it.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p floodgate-server --bin floodgate \
    && install -D -m 0755 target/release/floodgate /out/floodgate

# === run ===
# glibc and libgcc, no shell, no package manager; the "nonroot" user (65532).
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/floodgate /usr/local/bin/floodgate
USER 65532:65532
# 8080: HTTP check API, /healthz, /readyz, /metrics, admin API. 8081: Envoy RLS gRPC.
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/floodgate"]
# Listening beyond loopback needs an admin token (FLOODGATE_ADMIN_TOKEN): without one the server
# refuses to start, exit 64. `docker run IMAGE --version` prints the version and commit.
CMD ["--log-format", "json", "serve", "--config", "/etc/floodgate/floodgate.yaml", "--http", "0.0.0.0:8080", "--grpc", "0.0.0.0:8081"]
