"""Looking inside a model: the very numbers of one forward pass, rendered as text and pictures.

* :mod:`tformer.inspection.tracing` — :func:`trace` collects every intermediate tensor of a real forward pass
  (embeddings, Q/K/V, scores, masks, weights, add & norm, feed-forward, logits, top-k) from the model's hook
  points (:mod:`tformer.nn.hooks`).
* :mod:`tformer.inspection.decoding` — :func:`greedy_steps`: decoding one step at a time, each pick with its top-k.
* :mod:`tformer.inspection.toy` — :func:`toy_seq2seq`, the notes' d_model = 4 model.
* :mod:`tformer.inspection.format` — a trace as labelled text grids (``tformer trace``).
* :mod:`tformer.inspection.plots` — heatmaps of attention, masks and the positional encoding (matplotlib,
  imported only when a plot is drawn).

It knows nothing about training, tokenizer files or the command line; models never import it.
"""

from tformer.inspection.decoding import greedy_steps, top_k_probs
from tformer.inspection.toy import Toy, toy_seq2seq
from tformer.inspection.tracing import Entry, Trace, trace

__all__ = ["Entry", "Toy", "Trace", "greedy_steps", "top_k_probs", "toy_seq2seq", "trace"]
