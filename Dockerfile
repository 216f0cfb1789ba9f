# The Jindou server and store workers. BASE selects the base image: the standard Python image by
# default; CI builds on a local Debian image made with debootstrap (no registry is reachable there),
# which is why Python lives in a venv of its own rather than in the base's site-packages.
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE}
RUN python3 -m venv /opt/jindou
ENV PATH=/opt/jindou/bin:$PATH
WORKDIR /app
COPY pyproject.toml README.md ./
COPY server ./server
COPY engine ./engine
COPY bench ./bench
COPY static ./static
COPY pipeline ./pipeline
COPY deploy ./deploy
RUN pip install --no-cache-dir .
EXPOSE 8000
ENV JINDOU_STATIC=/app/static
CMD ["jindou", "serve", "--host", "0.0.0.0", "--port", "8000"]
