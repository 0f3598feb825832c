"""The :class:`Translator`: a seq2seq model and its tokenizers, from sentences to translations and BLEU.

``translate(["I am good."])`` with greedy, beam or sampling decoding, batched; ``evaluate(sources,
references)`` → sacreBLEU BLEU and chrF with their signatures. A model directory holds the model and
``src_tokenizer.json`` / ``tgt_tokenizer.json``.

The ids it pads, starts and ends with are the model's and its tokenizers': tformer's translation layout (``<pad>`` 0,
``<sos>`` 2, ``<eos>`` 3), or an Opus-MT translator's (:class:`~tformer.tokenizers.MarianTokenizer`: the source ends
with ``</s>``, the decoder starts from ``<pad>``, the model's ``pad_token_id``), as ``transformers``' MarianTokenizer
and ``generate`` use them.

A source longer than the model reads (``max_len`` tokens) is cut to its first ``max_len`` tokens, as training
cuts its pairs, with a :class:`SourceTruncated` warning that names the sentence and the limit (``tformer
translate`` prints it as one line). Only the first ``max_len`` · :data:`MAX_CHARS_PER_TOKEN` characters of a
sentence are tokenized, so a 1 MB line costs what a long sentence costs. A translation that reaches its length limit
(``max_new_tokens``, or the model's ``max_len - 1``) without its end token is cut there, likely mid-sentence: a
:class:`TranslationCut` warning names it and the limit.

Dimension legend: B batch, S source length.
"""

from __future__ import annotations

import contextlib
import json
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

from tformer import checks
from tformer.fast.linear import DecodingWeights
from tformer.files import atomic_write
from tformer.generation import SamplingConfig, beam_search, translate_ids
from tformer.generation.samplers import check_sampling
from tformer.generation.static_cache import StaticCaches
from tformer.loader import Loaded, load
from tformer.models.checkpoint import DECODING_FILE, model_dir, read_decoding
from tformer.models.seq2seq import Seq2SeqTransformer
from tformer.readers import read_json_object
from tformer.text import check_texts, normalize
from tformer.tokenizers import BPETokenizer, Tokenizer
from tformer.tokens import TRANSLATION_EOS as EOS
from tformer.tokens import TRANSLATION_SOS as SOS

__all__ = [
    "DECODING_FILE",
    "read_length_penalty",
    "tune_length_penalty",
    "save_length_penalty",
    "SRC_TOKENIZER",
    "TGT_TOKENIZER",
    "MAX_CHARS_PER_TOKEN",
    "SOURCE_BUCKET",
    "SourceTruncated",
    "TranslationCut",
    "CUTS",
    "recording_cuts",
    "Translator",
    "load_tokenizers",
    "corpus_bleu",
]

SRC_PREFIX, TGT_PREFIX = "src_", "tgt_"  # two tokenizers in one directory
SRC_TOKENIZER, TGT_TOKENIZER = SRC_PREFIX + BPETokenizer.file_name, TGT_PREFIX + BPETokenizer.file_name
# a subword token spans a few characters (a long French word with its ▁ is ~20): max_len tokens always fit in
# max_len · 64 characters, and a longer sentence is cut there before the tokenizer sees it
MAX_CHARS_PER_TOKEN = 64
SOURCE_BUCKET = 16  # translate(compile=True) pads each batch's sources to a multiple of this many tokens
LENGTH_PENALTIES = (0.6, 0.8, 1.0, 1.2, 1.4)  # what --tune-length-penalty tries


class SourceTruncated(UserWarning):
    """A source sentence was longer than the model reads: only its first ``max_len`` tokens were translated.
    ``number`` is the sentence's (from 1), ``detail`` what the message says after it."""

    def __init__(self, number: int, detail: str) -> None:
        super().__init__(f"source sentence {number} {detail}")
        self.number, self.detail = number, detail


class TranslationCut(UserWarning):
    """A translation reached its length limit without its end token: it is cut there, likely mid-sentence.
    ``number`` is the sentence's (from 1), ``tokens`` the limit, ``limit`` what set it (``max_new_tokens=128``, or
    ``the model's max_len 64 - 1``), ``by_model`` whether the model's length set it (``max_new_tokens`` cannot go
    past it)."""

    def __init__(self, number: int, tokens: int, limit: str, *, by_model: bool = False) -> None:
        super().__init__(f"translation {number} reached {tokens} tokens without its end token: cut there ({limit})")
        self.number, self.tokens, self.limit, self.by_model = number, tokens, limit, by_model


CUTS = (SourceTruncated, TranslationCut)  # the warnings that name a sentence cut by a length limit


@contextlib.contextmanager
def recording_cuts() -> Iterator[list[warnings.WarningMessage]]:
    """Every warning raised inside, each cut source and cut translation among them (:data:`CUTS`), however many
    (Python's default shows one per place): the commands say them in their own words."""
    with warnings.catch_warnings(record=True) as caught:
        for kind in CUTS:
            warnings.simplefilter("always", kind)
        yield caught


def load_tokenizers(directory: str | Path) -> tuple[BPETokenizer, BPETokenizer]:
    """The (source, target) BPE tokenizers saved in a model directory (a training run's: its best model's)."""
    directory = model_dir(directory)
    return BPETokenizer.load(directory, SRC_PREFIX), BPETokenizer.load(directory, TGT_PREFIX)


def corpus_bleu(hypotheses: list[str], references: list[list[str]]) -> tuple[float, float, str, str]:
    """sacreBLEU BLEU and chrF on detokenised text: (bleu, chrf, bleu_signature, chrf_signature).

    ``references[k][i]`` is the k-th reference of sentence i ('' or blank where a sentence has fewer than another
    one: passed to sacreBLEU as None, which it skips; an empty string it would score as a reference of length 0, the
    closest to a short hypothesis, and the brevity penalty would vanish: BLEU up to 100). A sentence whose every
    reference is blank keeps one empty reference, as sacreBLEU's own command reads a blank line.
    """
    import sacrebleu

    given: list[list[str | None]] = [list(refs) for refs in references]
    for i in range(len(hypotheses)):
        if any(refs[i].strip() for refs in references):
            for refs in given:
                refs[i] = refs[i] if (refs[i] or "").strip() else None
    bleu, chrf = sacrebleu.BLEU(), sacrebleu.CHRF()
    b = bleu.corpus_score(hypotheses, given)  # type: ignore[arg-type]  # None: sacreBLEU's "no k-th reference"
    c = chrf.corpus_score(hypotheses, given)  # type: ignore[arg-type]
    return b.score, c.score, str(bleu.get_signature()), str(chrf.get_signature())


@dataclass
class Translator:
    """A trained translation model and its tokenizers: ``translate`` and ``evaluate`` on raw sentences."""

    model: Seq2SeqTransformer
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    start_id: int = SOS  # what the decoder starts from (tformer's <sos>; a Marian's decoder_start_token_id)
    length_penalty: float = 1.0  # beam search's, unless a call gives one: the model's (DECODING_FILE), else 1.0
    # translate(compile=True)'s static KV caches, one per batch shape, kept for later batches and calls
    static_caches: StaticCaches = field(default_factory=StaticCaches, repr=False, compare=False)

    @property
    def pad_id(self) -> int:
        """The id sources are padded with: the model's, which its source mask hides."""
        return int(self.model.config.pad_id)

    @property
    def eos_id(self) -> int:
        """The id that ends a translation: the target tokenizer's end of text."""
        return EOS if self.tgt_tokenizer.eos_id is None else self.tgt_tokenizer.eos_id

    @classmethod
    def load(cls, directory: str | Path, device: str = "cpu", flag: str | None = None, fast: bool = True) -> Translator:
        """The translator saved in ``directory``: a model directory, a training run's (its best model), or a Hugging
        Face Marian directory written by ``tformer export`` — read by :func:`tformer.load` (``flag``: the argument
        its messages name, ``--model``; ``fast``: the fast kernels, False: the reference ones, ``--no-fast``)."""
        return cls.from_loaded(load(directory, device, family="seq2seq", flag=flag, fast=fast))

    @classmethod
    def from_loaded(cls, loaded: Loaded) -> Translator:
        """A :class:`Translator` of a translator :func:`tformer.load` read. Its tokenizers must hold the ids batches
        and decoding use: ``<pad>`` at the model's ``pad_id`` on both sides, a target ``<eos>``, and a target ``bos_id``
        (what its text starts from) that is the decoder's start (tformer's layout: ``<pad>`` 0, ``<sos>`` 2,
        ``<eos>`` 3; an Opus-MT's: ``<pad>`` both pads and starts, ``</s>`` ends); else one line naming the file."""
        src_tok = loaded.require_tokenizer()
        tgt_tok = loaded.target_tokenizer
        assert tgt_tok is not None and loaded.start_id is not None  # a translator always has a start
        src_prefix, tgt_prefix = loaded.kind.prefixes
        pad, start = loaded.config.pad_id, loaded.start_id
        for tok, prefix, wrong in (
            (src_tok, src_prefix, src_tok.pad_id != pad),
            (tgt_tok, tgt_prefix, tgt_tok.pad_id != pad or tgt_tok.eos_id is None or tgt_tok.bos_id != start),
        ):
            if wrong:
                raise ValueError(
                    f"{str(loaded.directory / (prefix + tok.file_name))!r} is a {tok.kind} tokenizer whose ids do not "
                    f"fit the model: <pad> {tok.pad_id}, start {tok.bos_id}, end {tok.eos_id}, where the model pads "
                    f"with {pad} (pad_id) and starts its decoder from {start}: they do not belong together"
                )
        return cls(loaded.model, src_tok, tgt_tok, start, read_length_penalty(loaded.directory))

    def save(self, directory: str | Path) -> None:
        self.model.save_pretrained(directory)
        self.save_tokenizers(directory)

    def save_tokenizers(self, directory: str | Path) -> None:
        """``src_tokenizer.json`` and ``tgt_tokenizer.json`` in ``directory``."""
        self.src_tokenizer.save(directory, SRC_PREFIX)
        self.tgt_tokenizer.save(directory, TGT_PREFIX)

    def encode_sources(self, sentences: list[str], numbers: list[int] | None = None) -> torch.Tensor:
        """(B, S) padded source ids, each sentence cut to the model's ``max_len`` tokens; a cut one gets a
        :class:`SourceTruncated` warning that calls it by its entry in ``numbers`` (default: 1, 2, ...)."""
        limit = self.model.config.max_len
        heads = [_head(normalize(s), limit * MAX_CHARS_PER_TOKEN) for s in sentences]  # (text, length if cut)
        texts = [text for text, _ in heads]
        encoded = self.src_tokenizer.encode_batch(texts, add_special_tokens=True)  # a Marian's ends with </s>
        rows = []
        for i, ((text, cut), ids) in enumerate(zip(heads, encoded)):
            if cut or len(ids) > limit:
                size = f"{cut:,} characters" if cut else f"{len(ids):,} tokens"
                detail = (
                    f"is longer than the model reads ({size}): translating its first {min(len(ids), limit)} tokens "
                    f"(max_len={limit})"
                )
                warnings.warn(SourceTruncated(numbers[i] if numbers else i + 1, detail), stacklevel=2)
            if len(ids) > limit:  # cut the text's pieces, keep what ends it
                ids = self.src_tokenizer.encode(text, add_special_tokens=True, max_length=limit)
            rows.append(ids or [self.pad_id])
        src = torch.full((len(rows), max(len(r) for r in rows)), self.pad_id, dtype=torch.long)  # (B, S)
        for i, r in enumerate(rows):
            src[i, : len(r)] = torch.tensor(r)
        return src.to(next(self.model.parameters()).device)

    @torch.no_grad()
    def translate(
        self,
        sentences: list[str],
        beam: int = 1,
        max_new_tokens: int = 128,
        batch_size: int = 64,
        length_penalty: float | None = None,
        sampling: SamplingConfig | None = None,
        seed: int | None = None,
        max_len: int | None = None,
        compile: bool = False,
    ) -> list[str]:
        """Translate a list of sentences, ``batch_size`` at a time (sorted by length to limit padding); each
        translation has at most ``max_new_tokens`` tokens (and the model's ``max_len - 1``). ``max_len`` is
        ``max_new_tokens``'s name before tformer 0.2.1 (in the model config, ``max_len`` is the longest sequence).

        ``compile=True`` decodes on a static KV cache with the one-token step compiled by ``torch.compile`` (on a GPU
        with CUDA graphs; :mod:`tformer.generation.static`): the same translations, the first batch paying the
        compilation. The sources of a batch are then padded to a multiple of :data:`SOURCE_BUCKET` tokens, so
        that batches of other lengths reuse the compiled step (the padding is masked: it changes nothing). The static
        caches are the translator's (:attr:`static_caches`): made once per batch shape, reused by later batches and
        calls, so the step is neither compiled nor, on a GPU, recorded as a CUDA graph again."""
        if max_len is not None:
            warnings.warn("Translator.translate: max_len is now called max_new_tokens", FutureWarning, stacklevel=2)
            max_new_tokens = max_len
        sentences = check_texts(sentences, "sentences")  # a str, or a list of them; no lone surrogate, no NUL
        checks.beam_size.check(beam, "beam")  # the bounds and words of the command line's flags
        checks.max_new_tokens.check(max_new_tokens, "max_len" if max_len is not None else "max_new_tokens")
        checks.positive_int.check(batch_size, "batch_size")
        length_penalty = self.length_penalty if length_penalty is None else length_penalty  # None: the model's
        checks.length_penalty.check(length_penalty, "length_penalty")
        check_sampling(sampling, seed)
        if beam > 1 and sampling is not None and sampling.do_sample:  # not transformers' sampled beams: refused
            raise ValueError(f"sampling with beam={beam}: beam search keeps the likeliest beams and draws nothing")
        vocab = self.model.config.tgt_vocab_size
        if beam > vocab:  # more beams than continuations: each step would rank the same tokens again
            raise ValueError(f"beam must be at most the target vocabulary size ({vocab} tokens), got {beam}")
        self.model.eval()
        max_len = min(max_new_tokens, self.model.config.max_len - 1)
        model_cap = f"the model's max_len {self.model.config.max_len} - 1"
        generator = torch.Generator().manual_seed(seed) if seed is not None else None
        sos_id, eos_id = self.start_id, self.eos_id
        # a blank sentence translates to "" without decoding: one translation for each sentence, in its place
        order = sorted((i for i, s in enumerate(sentences) if s.strip()), key=lambda i: len(sentences[i]))
        out: list[str] = [""] * len(sentences)
        decoding = DecodingWeights()  # the weight layouts the steps read, made once for all the batches of this call
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            src = self.encode_sources([sentences[i] for i in idx], [i + 1 for i in idx])
            if compile:
                src = _bucketed(src, self.model.config.max_len, self.pad_id)
            if beam > 1:
                ids = beam_search(
                    self.model,
                    src,
                    sos_id,
                    eos_id,
                    beam,
                    max_len,
                    length_penalty,
                    compile=compile,
                    decoding=decoding,
                    caches=self.static_caches,
                )
            else:
                sampling = sampling or SamplingConfig()
                ids = translate_ids(
                    self.model,
                    src,
                    sos_id,
                    eos_id,
                    max_len,
                    sampling,
                    generator,
                    compile=compile,
                    decoding=decoding,
                    caches=self.static_caches,
                )
            for i, row in zip(idx, ids):
                if eos_id not in row and len(row) >= max_len:  # stopped by the limit, not by the model
                    by_model = max_new_tokens > max_len
                    cap = model_cap if by_model else f"max_new_tokens={max_new_tokens}"
                    cut = TranslationCut(i + 1, max_len, cap, by_model=by_model)
                    warnings.warn(cut, stacklevel=3)  # past torch.no_grad's wrapper
                out[i] = self.tgt_tokenizer.decode(row[: row.index(eos_id)] if eos_id in row else row)
        return out

    def evaluate(
        self,
        sources: list[str],
        references: list[list[str]],
        beam: int = 1,
        max_new_tokens: int = 128,
        batch_size: int = 64,
        length_penalty: float | None = None,
    ) -> dict:
        """BLEU and chrF (sacreBLEU) of the translations of ``sources`` against ``references`` (one list per
        reference set), with the signatures and the ``hypotheses``; the decoding settings are :meth:`translate`'s."""
        sources = check_texts(sources, "sources", one=False)
        if not isinstance(references, (list, tuple)) or not all(isinstance(r, (list, tuple)) for r in references):
            raise ValueError(f"references must be a list of reference sets (lists of strings), got {references!r:.60}")
        for k, refs in enumerate(references):
            check_texts(refs, f"references[{k}]", one=False)
            if len(refs) != len(sources):
                raise ValueError(f"references[{k}] has {len(refs)} sentences, sources has {len(sources)}")
        hyps = self.translate(
            sources, beam=beam, max_new_tokens=max_new_tokens, batch_size=batch_size, length_penalty=length_penalty
        )
        bleu, chrf, bleu_sig, chrf_sig = corpus_bleu(hyps, references)
        return {"bleu": bleu, "chrf": chrf, "bleu_signature": bleu_sig, "chrf_signature": chrf_sig, "hypotheses": hyps}


def read_length_penalty(directory: str | Path) -> float:
    """The length penalty a model directory keeps as its default (``decoding.json``, written by ``tformer evaluate
    --tune-length-penalty``; a Hugging Face directory's ``generation_config.json``), else 1.0; a damaged file is one
    line naming it (:func:`tformer.models.checkpoint.read_decoding`)."""
    return float(read_decoding(directory).get("length_penalty", 1.0))


def tune_length_penalty(
    translator: Translator,
    sources: list[str],
    references: list[list[str]],
    beam: int,
    penalties: tuple[float, ...] = LENGTH_PENALTIES,
    **decoding,
) -> tuple[float, list[dict]]:
    """The length penalty of ``penalties`` under which beam search of width ``beam`` scores the best BLEU on
    ``sources`` (a validation set, never a test set), ties going to the one nearest 1.0; and each one's scores."""
    if beam < 2:
        raise ValueError(f"--tune-length-penalty needs --beam 2 or more (the penalty ranks beams), got --beam {beam}")
    table = []
    for penalty in penalties:
        scores = translator.evaluate(sources, references, beam=beam, length_penalty=penalty, **decoding)
        table.append({"length_penalty": penalty, "bleu": scores["bleu"], "chrf": scores["chrf"]})
    best = max(table, key=lambda row: (row["bleu"], -abs(row["length_penalty"] - 1.0)))
    return best["length_penalty"], table


def save_length_penalty(directory: str | Path, length_penalty: float, **tuned_on) -> Path:
    """``directory/decoding.json``: the length penalty the model's beam search uses unless told another. In a Hugging
    Face directory, its ``generation_config.json``'s (the one transformers reads: one setting, not two that
    disagree), and ``decoding.json`` only where an earlier tuning left one, which tformer would read first."""
    own, hf = Path(directory) / DECODING_FILE, Path(directory) / "generation_config.json"
    if hf.is_file():
        config = {**read_json_object(hf, "generation config"), "length_penalty": length_penalty}
        atomic_write(hf, lambda tmp: Path(tmp).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8"))
        if not own.is_file():
            return hf
    text = json.dumps({"length_penalty": length_penalty, "tuned_on": tuned_on}, indent=1)
    atomic_write(own, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
    return hf if hf.is_file() else own


def _bucketed(src: torch.Tensor, limit: int, pad: int) -> torch.Tensor:
    """``src`` (B, S) right-padded with ``pad`` to a multiple of :data:`SOURCE_BUCKET` tokens (at most ``limit``):
    (B, S')."""
    length = min(-(-src.shape[1] // SOURCE_BUCKET) * SOURCE_BUCKET, max(limit, src.shape[1]))
    return torch.nn.functional.pad(src, (0, length - src.shape[1]), value=pad)


def _head(text: str, budget: int) -> tuple[str, int]:
    """(``text``, 0), or its first ``budget`` characters (cut at a space when there is one in the second half)
    and its full length when it is longer."""
    if len(text) <= budget:
        return text, 0
    space = text.rfind(" ", budget // 2, budget + 1)
    return text[: space if space > 0 else budget], len(text)
