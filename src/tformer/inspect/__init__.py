"""Looking inside a model: the very numbers of one forward pass, rendered as text and pictures.

* :mod:`tformer.inspect.tracing` — :func:`trace` collects every intermediate tensor of a real forward pass
  (embeddings, Q/K/V, scores, masks, weights, add & norm, feed-forward, logits, top-k) from the model's hook
  points (:mod:`tformer.nn.hooks`).
* :mod:`tformer.inspect.decoding` — :func:`greedy_steps`: decoding one step at a time, each pick with its top-k.
* :mod:`tformer.inspect.toy` — :func:`toy_seq2seq`, the notes' d_model = 4 model.
* :mod:`tformer.inspect.format` — a trace as labelled text grids (``tformer trace``).
* :mod:`tformer.inspect.plots` — heatmaps of attention, masks and the positional encoding (matplotlib,
  imported only when a plot is drawn).

It knows nothing about training, tokenizer files or the command line; models never import it.
"""

from tformer.inspect.decoding import greedy_steps, top_k_probs
from tformer.inspect.toy import Toy, toy_seq2seq
from tformer.inspect.tracing import Entry, Trace, trace

__all__ = ["Entry", "Toy", "Trace", "greedy_steps", "top_k_probs", "toy_seq2seq", "trace"]
