"""Bench only: an OpenAI-format ``POST /v1/embeddings`` JSON server over the NULL ENGINE (a real
tokenizer, fixed vectors): the transport suite's JSON baseline. Never serves real embeddings."""

from __future__ import annotations

import argparse
import json

# At module level: FastAPI resolves the handlers' annotations (``Request``) from the module.
from fastapi import FastAPI, Request, Response
from starlette.concurrency import run_in_threadpool


def build_app(models: dict[str, str]) -> FastAPI:
    from embedtext.server.engine.null_backend import NullBackend
    from embedtext.server.models.source import load_model_spec
    from embedtext.server.tokenization.pool import TokenizerPool

    served = {}
    for name, path in models.items():
        spec = load_model_spec(path, name=name)
        served[name] = (
            TokenizerPool(str(spec.tokenizer_file), spec.max_tokens),
            NullBackend(spec, name=f"null-json-{name}"),
        )
    app = FastAPI()

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.post("/v1/embeddings")
    async def embeddings(request: Request) -> Response:
        payload = json.loads(await request.body())
        texts = payload["input"]
        texts = [texts] if isinstance(texts, str) else texts
        pool, backend = served[payload.get("model") or next(iter(served))]
        ids = await pool.tokenize(texts)
        vectors = await backend.embed(ids)

        def encode() -> bytes:
            data = [{"object": "embedding", "index": i, "embedding": row} for i, row in enumerate(vectors.tolist())]
            tokens = int(ids.lengths.sum())
            usage = {"prompt_tokens": tokens, "total_tokens": tokens}
            return json.dumps({"object": "list", "data": data, "model": payload.get("model"), "usage": usage}).encode()

        return Response(await run_in_threadpool(encode), media_type="application/json")

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", action="append", required=True, help="NAME=DIR")
    args = parser.parse_args()
    import uvicorn

    models = dict(m.split("=", 1) for m in args.model)
    uvicorn.run(build_app(models), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
