FROM python:3.11-slim
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
