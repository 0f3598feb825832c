"""Encoder-only (BERT) workflows on top of :class:`tformer.Bert`.

* :mod:`.tokenization` — WordPiece tokenizers (trained on our corpora, or the uncased BERT vocabulary)
  and the ``[CLS] A [SEP] B [SEP]`` layout with segment ids.
* :mod:`.pretraining` — documents → NSP sentence pairs → the MLM collator → :class:`BertPretrainTask`.
* :mod:`.fill_mask` — load a model directory (ours or a Hugging Face one) and fill in ``[MASK]``.
* :mod:`.classification` — ``text<TAB>label`` fine-tuning (:class:`ClassifyTask`), :class:`TextClassifier`
  and the English-vs-French language-identification data built from Tatoeba.
"""

from tformer.bert.classification import ClassifyTask, TextClassifier, langid_examples, read_labelled_tsv
from tformer.bert.fill_mask import fill_mask, load_masked_lm
from tformer.bert.pretraining import BertBatch, BertPretrainTask, MLMCollator, nsp_pairs, read_documents
from tformer.bert.tokenizer import SPECIAL_TOKENS, WordPiece, train_wordpiece

__all__ = [
    "SPECIAL_TOKENS", "WordPiece", "train_wordpiece",
    "BertBatch", "MLMCollator", "BertPretrainTask", "nsp_pairs", "read_documents",
    "fill_mask", "load_masked_lm",
    "ClassifyTask", "TextClassifier", "langid_examples", "read_labelled_tsv",
]
