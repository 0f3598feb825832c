"""Looking inside a model: the very numbers of one forward pass, rendered as text and pictures.

* :mod:`tformer.inspect.tracing` — :func:`trace` collects every intermediate tensor of a real forward pass
  (embeddings, Q/K/V, scores, masks, weights, add & norm, feed-forward, logits, top-k) through forward hooks
  and the attention :class:`~tformer.nn.recorder.Recorder`; :func:`toy_seq2seq` is the notes' d_model = 4 model.
* :mod:`tformer.inspect.format` — a trace as labelled text grids (``tformer trace``).
* :mod:`tformer.inspect.plots` — heatmaps of attention, masks and the positional encoding (matplotlib,
  imported only when a plot is drawn).

It knows nothing about training, tokenizer files or the command line; models never import it.
"""

from tformer.inspect.tracing import Entry, Toy, Trace, greedy_steps, top_k_probs, toy_seq2seq, trace

__all__ = ["Entry", "Toy", "Trace", "greedy_steps", "top_k_probs", "toy_seq2seq", "trace"]
