"""Encoder-only (BERT) workflows on top of :class:`tformer.Bert`.

* its tokenizer is :mod:`tformer.tokenizers`' ``wordpiece`` kind (trained on our corpora, or the uncased BERT
  vocabulary), with the ``[CLS] A [SEP] B [SEP]`` layout and segment ids (special tokens: :mod:`tformer.tokens`).
* :mod:`.pretraining` — documents of sentences (a corpus of any size, memory-mapped: :mod:`tformer.data.sentences`)
  → NSP sentence pairs → the MLM collator → :class:`BertPretrainTask`.
* :mod:`.fill_mask` — a BERT with its MLM head (any directory :func:`tformer.load` reads) fills in ``[MASK]``.
* :mod:`.classification` — ``text<TAB>label`` fine-tuning (:class:`ClassifyTask`), :class:`TextClassifier`
  and the English-vs-French language-identification data built from Tatoeba.
* :mod:`.embeddings` — sentence embeddings (:class:`SentenceEncoder`: mean pooling, L2 normalisation).
* :mod:`.run` — the entry points :func:`train` (pretraining), :func:`prepare` (its corpus, ahead of it) and
  :func:`train_classifier`.

This package knows the BERT model, the Trainer and the Hugging Face weight mapping; it knows nothing
about translation, the language model or the command line.
"""

from tformer.bert.classification import ClassifyTask, TextClassifier, langid_examples, read_labelled_tsv, write_tsv
from tformer.bert.embeddings import SentenceEncoder
from tformer.bert.fill_mask import fill_mask, load_masked_lm, masked_lm
from tformer.bert.pretraining import (
    BertBatch,
    BertPretrainTask,
    MLMCollator,
    PairBatch,
    nsp_arrays,
    nsp_pairs,
    read_sentence_documents,
)
from tformer.bert.run import prepare, setup, setup_classifier, train, train_classifier

__all__ = [
    "BertBatch",
    "MLMCollator",
    "BertPretrainTask",
    "PairBatch",
    "nsp_pairs",
    "nsp_arrays",
    "read_sentence_documents",
    "fill_mask",
    "load_masked_lm",
    "masked_lm",
    "ClassifyTask",
    "TextClassifier",
    "langid_examples",
    "read_labelled_tsv",
    "write_tsv",
    "SentenceEncoder",
    "setup",
    "train",
    "prepare",
    "setup_classifier",
    "train_classifier",
]
