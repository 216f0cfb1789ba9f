# NATS JetStream from Debian's package, for hosts that reach a Debian mirror but no image registry
# (CI). docker-compose.yml uses the official nats image; the CI test swaps this one in.
ARG BASE=debian:bookworm-slim
FROM ${BASE}
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nats-server \
 && rm -rf /var/lib/apt/lists/*
ENTRYPOINT ["nats-server"]
