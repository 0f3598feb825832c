"""Translation end to end: corpus → tokenizers → batches → training → translations → BLEU.

* :mod:`.pairs` — sentence pairs: read (TSV, aligned files, the built-in corpus of :mod:`.toy_corpus`),
  normalise, filter, split by source sentence; :mod:`.download` fetches corpora into a cache;
* the BPE tokenizers (``bpe``) come from :mod:`tformer.tokenizers`, their special tokens from :mod:`tformer.tokens`;
* :mod:`.batching` — teacher-forcing batches under a token budget, from the pairs' lengths (:class:`EncodedPairs`:
  numpy arrays over memory-mapped shards, :mod:`tformer.data.pairs`);
* :mod:`.task` — :class:`TranslationTask`, what the Trainer trains;
* :mod:`.translator` — :class:`Translator`: model + tokenizers, ``translate`` and ``evaluate`` (BLEU, chrF);
* :mod:`.run` — the entry points :func:`prepare` (the model), :func:`train`, :func:`evaluate_files`, and
  :func:`~tformer.translation.run.prepare_data` (a TSV into the cache: ``tformer data prepare translation``).

This package knows the seq2seq model, the Trainer and the decoding loops; it knows nothing about the
language model, BERT or the command line.
"""

from tformer.translation.batching import Batch, EncodedPairs, make_batch, token_budget_batches
from tformer.translation.pairs import Split, load_corpus, load_splits, read_aligned, read_tsv, split_corpus
from tformer.translation.run import evaluate_files, prepare, setup, train, train_tokenizers
from tformer.translation.task import TranslationTask
from tformer.translation.translator import Translator, corpus_bleu

__all__ = [
    "Split",
    "load_corpus",
    "load_splits",
    "read_aligned",
    "read_tsv",
    "split_corpus",
    "Batch",
    "make_batch",
    "token_budget_batches",
    "EncodedPairs",
    "TranslationTask",
    "Translator",
    "corpus_bleu",
    "train_tokenizers",
    "prepare",
    "setup",
    "train",
    "evaluate_files",
]
