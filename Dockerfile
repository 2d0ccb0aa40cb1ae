# dlockd container image, built from this source tree:
#
#   docker build -t dlockd .
#   docker run -d --name dlockd -p 7480:7480 dlockd
#   docker exec dlockd dlock ping
#
# The first stage builds the Debian packages with dpkg-buildpackage (as
# debian/ describes them); the second installs only dlockd and dlock into
# debian:12-slim. dlockd runs as the system user dlockd (uid and gid 480, fixed
# so that Kubernetes' runAsUser and fsGroup can name them), reads
# /etc/dlockd/dlockd.yaml (conf/dlockd-docker.yaml) and listens on
# 0.0.0.0:7480 and unix:/run/dlockd/dlockd.sock. See docs/kubernetes.md.

FROM debian:12 AS build
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
       build-essential debhelper dpkg-dev fakeroot pkg-config \
       libevent-dev libssl-dev libyaml-dev libhiredis-dev libsystemd-dev \
       libnghttp2-dev libprotobuf-c-dev protobuf-c-compiler \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src/dlockd
COPY . .
RUN DEB_BUILD_OPTIONS="nocheck parallel=2" dpkg-buildpackage -us -uc -b -Pnocheck \
    && mkdir /debs && cp ../dlockd_*.deb ../dlock_*.deb /debs/

FROM debian:12-slim
# The user first, with a fixed id: the package's postinst keeps an existing one.
RUN groupadd --system --gid 480 dlockd \
    && useradd --system --uid 480 --gid dlockd --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin dlockd
COPY --from=build /debs /tmp/debs
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends /tmp/debs/*.deb \
    && rm -rf /var/lib/apt/lists/* /tmp/debs \
    && install -d -o dlockd -g dlockd -m 0755 /run/dlockd
COPY conf/dlockd-docker.yaml /etc/dlockd/dlockd.yaml
USER dlockd:dlockd
EXPOSE 7480
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["dlock", "-a", "unix:/run/dlockd/dlockd.sock", "ping"]
CMD ["dlockd", "-c", "/etc/dlockd/dlockd.yaml"]
