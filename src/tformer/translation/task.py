"""Translation end to end: corpus → tokenizers → batches → training → translations → BLEU.

* :func:`load_corpus` reads a TSV pairs file, an aligned pair of files, or the built-in corpus.
* :class:`TranslationTask` is what the :class:`~tformer.training.trainer.Trainer` trains: teacher-forced
  batches by length under a token budget, label-smoothed cross-entropy over real tokens,
  validation loss and sacreBLEU.
* :class:`Translator` = model + tokenizers: ``translate(["I am good."])`` with greedy, beam or
  sampling, batched; ``evaluate(sources, references)`` → BLEU and chrF with their signatures.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from tformer.training import distributed
from tformer.translation.batching import Batch, make_batch, token_budget_batches
from tformer.translation.pairs import filter_pairs, group_references, read_aligned, read_tsv, split_pairs
from tformer.translation.toy_corpus import builtin_pairs
from tformer.generation import SamplingConfig, beam_search, translate_ids
from tformer.fast.losses import sequence_cross_entropy  # the training loss: fused CPU backward
from tformer.models.seq2seq import Seq2SeqTransformer
from tformer.translation.tokenizer import EOS, PAD, SOS, TextTokenizer

__all__ = ["load_corpus", "split_corpus", "prepare", "TranslationTask", "Translator", "corpus_bleu"]

SRC_TOKENIZER, TGT_TOKENIZER = "src_tokenizer.json", "tgt_tokenizer.json"


def load_corpus(data: str | None, src_lang: str = "en", tgt_lang: str = "fr") -> list[tuple[str, str]]:
    """Pairs from ``data``: ``None``/``"builtin"`` (the built-in corpus), a ``.tsv`` file, or a
    directory with ``train.<src_lang>`` and ``train.<tgt_lang>`` (Multi30k layout)."""
    if data in (None, "builtin"):
        return builtin_pairs()
    path = Path(data)
    if path.is_dir():
        return read_aligned(path / f"train.{src_lang}", path / f"train.{tgt_lang}")
    if path.is_file():
        return read_tsv(path)
    raise FileNotFoundError(f"--data {data!r}: no such file or directory (expected a .tsv file or a Multi30k-style directory)")


def corpus_bleu(hypotheses: list[str], references: list[list[str]]) -> tuple[float, float, str, str]:
    """sacreBLEU BLEU and chrF on detokenised text: (bleu, chrf, bleu_signature, chrf_signature).

    ``references[k][i]`` is the k-th reference of sentence i ('' where a sentence has fewer).
    """
    import sacrebleu

    bleu, chrf = sacrebleu.BLEU(), sacrebleu.CHRF()
    b = bleu.corpus_score(hypotheses, references)
    c = chrf.corpus_score(hypotheses, references)
    return b.score, c.score, str(bleu.get_signature()), str(chrf.get_signature())


@dataclass
class Translator:
    model: Seq2SeqTransformer
    src_tokenizer: TextTokenizer
    tgt_tokenizer: TextTokenizer

    @classmethod
    def load(cls, directory: str | Path, device: str = "cpu") -> "Translator":
        directory = Path(directory)
        model = Seq2SeqTransformer.from_pretrained(directory).to(device)
        return cls(model, TextTokenizer.load(directory / SRC_TOKENIZER), TextTokenizer.load(directory / TGT_TOKENIZER))

    def save(self, directory: str | Path) -> None:
        self.model.save_pretrained(directory)
        self.src_tokenizer.save(Path(directory) / SRC_TOKENIZER)
        self.tgt_tokenizer.save(Path(directory) / TGT_TOKENIZER)

    def encode_sources(self, sentences: list[str]) -> torch.Tensor:
        from tformer.translation.pairs import normalize

        limit = self.model.config.max_len
        rows = [ids[:limit] or [PAD] for ids in self.src_tokenizer.encode_batch([normalize(s) for s in sentences])]
        src = torch.full((len(rows), max(len(r) for r in rows)), PAD, dtype=torch.long)  # (B, S)
        for i, r in enumerate(rows):
            src[i, : len(r)] = torch.tensor(r)
        return src.to(next(self.model.parameters()).device)

    @torch.no_grad()
    def translate(self, sentences: list[str], beam: int = 1, max_len: int = 128, batch_size: int = 64,
                  length_penalty: float = 1.0, sampling: SamplingConfig | None = None, seed: int | None = None) -> list[str]:
        """Translate a list of sentences, ``batch_size`` at a time (sorted by length to limit padding)."""
        if isinstance(sentences, str):
            sentences = [sentences]
        self.model.eval()
        max_len = min(max_len, self.model.config.max_len - 1)
        generator = torch.Generator().manual_seed(seed) if seed is not None else None
        order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
        out: list[str] = [""] * len(sentences)
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            src = self.encode_sources([sentences[i] for i in idx])
            if beam > 1:
                ids = beam_search(self.model, src, SOS, EOS, beam, max_len, length_penalty)
            else:
                ids = translate_ids(self.model, src, SOS, EOS, max_len, sampling or SamplingConfig(), generator)
            for i, row in zip(idx, ids):
                out[i] = self.tgt_tokenizer.decode(row)
        return out

    def evaluate(self, sources: list[str], references: list[list[str]], beam: int = 1, max_len: int = 128) -> dict:
        hyps = self.translate(sources, beam=beam, max_len=max_len)
        bleu, chrf, bleu_sig, chrf_sig = corpus_bleu(hyps, references)
        return {"bleu": bleu, "chrf": chrf, "bleu_signature": bleu_sig, "chrf_signature": chrf_sig, "hypotheses": hyps}


class TranslationTask:
    """Teacher-forced training of a :class:`Translator` on (source, target) sentence pairs."""

    metric, higher_is_better = "bleu", True

    def __init__(self, translator: Translator, train: list[tuple[str, str]], valid: list[tuple[str, str]],
                 max_tokens: int = 4096, label_smoothing: float = 0.1, seed: int = 0, bleu_sentences: int = 500,
                 beam: int = 1) -> None:
        self.translator, self.max_tokens, self.label_smoothing, self.seed, self.beam = translator, max_tokens, label_smoothing, seed, beam
        limit = translator.model.config.max_len - 1
        self.train_ids = self._encode(train, limit)
        self.valid_ids = self._encode(valid, limit)
        sources, refs = group_references(valid)
        self.bleu_sources = sources[:bleu_sentences]
        self.bleu_refs = [r[:bleu_sentences] for r in refs]

    def _encode(self, pairs: list[tuple[str, str]], limit: int) -> list[tuple[list[int], list[int]]]:
        src = self.translator.src_tokenizer.encode_batch([s for s, _ in pairs])
        tgt = self.translator.tgt_tokenizer.encode_batch([t for _, t in pairs])
        return [(s[:limit], t[:limit]) for s, t in zip(src, tgt) if s and t]

    def train_batches(self, epoch: int) -> list[Batch]:
        groups = token_budget_batches(self.train_ids, self.max_tokens, seed=self.seed * 100_003 + epoch)
        return [make_batch([self.train_ids[i] for i in g]) for g in groups]

    @staticmethod
    def count_tokens(batch: Batch) -> int:
        return batch.n_tokens

    def loss(self, model, batch: Batch) -> tuple[torch.Tensor, int]:
        batch = batch.to(next(model.parameters()).device)
        logits = model(batch.src, batch.tgt_in)  # (B, T, V)
        loss = sequence_cross_entropy(logits, batch.tgt_out, ignore_index=PAD, label_smoothing=self.label_smoothing, reduction="sum")
        return loss, batch.n_tokens

    def evaluate(self, model) -> dict:
        total, tokens = 0.0, 0
        for g in token_budget_batches(self.valid_ids, self.max_tokens, seed=0, shuffle=False):
            batch = make_batch([self.valid_ids[i] for i in g]).to(next(model.parameters()).device)
            logits = model(batch.src, batch.tgt_in)
            total += float(sequence_cross_entropy(logits, batch.tgt_out, ignore_index=PAD, reduction="sum"))
            tokens += batch.n_tokens
        result = {"val_loss": total / max(tokens, 1)}
        if self.bleu_sources:
            scores = self.translator.evaluate(self.bleu_sources, self.bleu_refs, beam=self.beam)
            result.update(bleu=scores["bleu"], chrf=scores["chrf"])
        else:
            result["bleu"] = 0.0
        return result

    def save_extra(self, directory) -> None:
        Path(directory).mkdir(parents=True, exist_ok=True)
        self.translator.src_tokenizer.save(Path(directory) / SRC_TOKENIZER)
        self.translator.tgt_tokenizer.save(Path(directory) / TGT_TOKENIZER)


def split_corpus(pairs: list[tuple[str, str]], seed: int = 0, valid: float | int = 0.05, test: float | int = 0.05,
                 max_chars: int = 300, verbose: bool = True):
    """Filter (empty / over-long) and split grouped by source; deterministic for a given seed."""
    kept, stats = filter_pairs(pairs, max_chars)
    split = split_pairs(kept, valid, test, seed)
    if verbose:
        print(f"data: {stats}; split into {len(split.train)} train / {len(split.valid)} valid / {len(split.test)} test pairs")
    return split


def train_tokenizers(split, vocab_size: int = 8000, joint: bool = True) -> tuple:
    """BPE tokenizers (source, target) trained on the training split; one shared tokenizer when ``joint``."""
    from tformer.translation.tokenizer import train_bpe

    if joint:
        tok = train_bpe([x for pair in split.train for x in pair], vocab_size)
        return tok, tok
    return train_bpe([s for s, _ in split.train], vocab_size), train_bpe([t for _, t in split.train], vocab_size)


def prepare(split, out_dir: str | Path, preset: str = "small", vocab_size: int = 8000, joint: bool = True,
            seed: int = 0, tokenizers: tuple | None = None, **config_overrides) -> Translator:
    """Train BPE tokenizers on the training split (or take ``tokenizers`` = (source, target)) and build the model.

    Writes the held-out splits to ``OUT/data/{valid,test}.tsv`` so evaluation can be repeated (rank 0 alone,
    under torchrun).
    """
    from tformer.models.seq2seq import Seq2SeqConfig

    src_tok, tgt_tok = tokenizers or train_tokenizers(split, vocab_size, joint)
    config = Seq2SeqConfig.preset(preset, src_vocab_size=src_tok.vocab_size, tgt_vocab_size=tgt_tok.vocab_size,
                                  share_embeddings=joint, pad_id=PAD, **config_overrides)
    torch.manual_seed(seed)
    translator = Translator(Seq2SeqTransformer(config), src_tok, tgt_tok)
    if distributed.is_main_process():
        data_dir = Path(out_dir) / "data"
        data_dir.mkdir(parents=True, exist_ok=True)
        for name, part in (("valid", split.valid), ("test", split.test)):
            (data_dir / f"{name}.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in part), encoding="utf-8")
    return translator
