"""``tformer explore``: the glass box in the browser — every number of a real forward pass and of decoding.

* :mod:`.session` — :class:`Session`: one model (any family, or the notes' toy) and the JSON API's answers;
* :mod:`.decoding` — greedy steps, the beam-search tree, teacher forcing and sampling, watched from the library's
  own decoding code; :mod:`.text_codecs` — text ↔ ids per tokenizer; :mod:`.formulas` — each stage's sentence;
  :mod:`.params` — a request's fields, checked;
* :mod:`.server` — the Starlette app: the API, the page in ``static/``, the Host and Origin checks;
* :mod:`.export` — one self-contained HTML file with the answers embedded (no server needed).

An application like the CLI: it uses the families, :mod:`tformer.inspection` and :mod:`tformer.generation`; nothing
in the library imports it. The API is written down in ``docs/explore-api.md``.
"""

from tformer.explore.model import Model, load_model
from tformer.explore.session import Session

__all__ = ["Model", "Session", "load_model"]
