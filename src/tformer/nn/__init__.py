"""The parts of the Transformer as the notes teach them, in plain PyTorch; read in this order:

* :mod:`.masks` — the one mask convention (boolean, ``True`` = may attend), padding and look-ahead masks;
* :mod:`.positional` — sinusoidal, learned and rotary positions, the input embedding;
* :mod:`.attention` — scaled dot-product attention (fused and reference paths), multi-head attention;
* :mod:`.cache` — the KV cache of incremental decoding;
* :mod:`.norms` — LayerNorm and RMSNorm (with Gemma's ``1 + weight`` form);
* :mod:`.feedforward` — the position-wise feed-forwards: the paper's MLP and the gated one (SwiGLU, GeGLU);
* :mod:`.layers` — add & norm, encoder and decoder layers and stacks;
* :mod:`.shift` — token shift: a sub-layer also reads the positions just before its own;
* :mod:`.losses` — cross-entropy over real tokens, with label smoothing;
* :mod:`.hooks` — a named hook point at every intermediate tensor: capture it, or patch it;
* :mod:`.from_torch` — PyTorch's own Transformer modules converted into these parts, with the same weights.

Nothing here exists only for speed: the CPU fast paths live in :mod:`tformer.fast`, swapped onto these modules
by :func:`tformer.fast.speed_up`, and nothing in this package imports them.

Dimension legend: B batch, H heads (Hkv key/value heads), T length, Tq/Tk query/key length, D model dim, Dh head dim, F feed-forward
dim, V vocabulary size.
"""
