"""``tformer serve``: one model behind OpenAI's HTTP API, for the clients people already use.

    from tformer.serve import Served, serve
    serve(Served.open("./SmolLM2-135M-Instruct"), port=8000)      # then, from any OpenAI client:
    # openai.OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="-").chat.completions.create(model=..., messages=...)

* :mod:`.protocol` — a request body read and checked into a dataclass; OpenAI's error object (:class:`APIError`);
* :mod:`.answers` — OpenAI's answers, whole and as server-sent-event chunks;
* :mod:`.model` — :class:`Served` (the model and its tokenizer, or a translator) and the work of each endpoint:
  :func:`tformer.lm.generate`, :func:`tformer.lm.chat.reply`, :meth:`tformer.translation.Translator.translate`;
* :mod:`.worker` — one worker thread running the generations one at a time from a FIFO queue, and the bridge that
  streams their text to the requests' event loop;
* :mod:`.app` — the Starlette app (routes, limits, API key, logging) and :func:`serve`, which runs it with uvicorn.

Concurrency: one model, one worker thread; requests are answered one after another in the order they came (no
batching), each exactly as it would be alone. This package knows the families' entry points and HTTP; it knows
nothing about training, inspection or the command line.
"""

from tformer.serve.app import create_app, listen, serve, server_for
from tformer.serve.model import Outcome, Served
from tformer.serve.protocol import APIError
from tformer.serve.worker import Cancelled, Job, Worker

__all__ = ["Served", "Outcome", "APIError", "Worker", "Job", "Cancelled", "create_app", "listen", "serve", "server_for"]
