# One image for every evidence-store service; the command picks the service
# (`evidence writer`, `evidence projector`, `evidence api`, `evidence topics ensure`).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml constraints.txt README.md ./
COPY . .
RUN pip install --no-cache-dir -c constraints.txt './packaging/contract[tlog]' ./packaging/client .
USER nobody
ENTRYPOINT ["evidence"]
