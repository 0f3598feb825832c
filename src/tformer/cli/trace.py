"""``tformer trace``: walk one real forward pass step by step and print every intermediate tensor.

    tformer trace --toy                                   # the notes' d_model = 4 walk-through
    tformer trace --model DIR "I am good." --target "Je vais bien" --layer 0 --head 1
    tformer trace --model GPT_DIR --prompt "To be" --max-new-tokens 10 --json trace.json
    tformer trace --model DIR --ids "4 5 6 7"             # no tokenizer files: raw ids

``--model`` is any directory ``tformer.load`` reads (a run, a model directory, a Hugging Face one; every family),
with its tokenizer of whatever kind: ``src_tokenizer.json`` and ``tgt_tokenizer.json`` (seq2seq),
``char_tokenizer.json`` or ``tokenizer.json`` (GPT), ``tokenizer.json`` or ``vocab.txt`` (BERT). The text is encoded
as the model reads it (``Loaded.encode``: ``[CLS] … [SEP]`` for BERT, a Hugging Face tokenizer's BOS, the
normalised sentence for a translator and ``<sos>`` before its target), as ``fill-mask``, ``generate``, training and
the explorer encode it.
"""

from __future__ import annotations

import re
import sys

from tformer.cli.flags import add
from tformer.cli.validate import Number, non_negative_int, output_file


def add_input_args(p) -> None:
    """The model and input options shared by ``tformer trace`` and ``tformer plot attention``."""
    src = p.add_mutually_exclusive_group(required=True)
    add(src, "--model", model={"help": "a run, model or Hugging Face directory of any family (tformer.load)"})
    src.add_argument("--toy", action="store_true", help="the notes' d_model = 4 translator of 'I am good .'")
    p.add_argument("text", nargs="?", help="input text: the source sentence (seq2seq), prompt (GPT) or text (BERT)")
    p.add_argument("--prompt", help="the same as TEXT (reads better for GPT)")
    p.add_argument(
        "--target",
        help="seq2seq: target text fed to the decoder after <sos> (teacher forcing); plot attention's default: the "
        "model's own greedy translation",
    )
    p.add_argument("--ids", help="space-separated input ids, when the model directory has no tokenizer")
    p.add_argument("--target-ids", help="seq2seq: space-separated decoder input ids (default: its start, <sos> = 2)")


def add_parser(sub) -> None:
    p = sub.add_parser("trace", help="print every intermediate tensor of one forward pass")
    add_input_args(p)
    add(
        p,
        "--candidates",
        "--max-new-tokens",
        candidates={"help": "likeliest next tokens shown at each position"},
        max_new_tokens={
            "type": Number(int, 0, 100_000),
            "help": "greedy generation steps after the trace (default 5 for --toy, else 20)",
        },
    )
    p.add_argument("--layer", type=non_negative_int, help="only this layer's tensors (one the model has)")
    p.add_argument("--head", type=non_negative_int, help="only this attention head (one the model has)")
    p.add_argument("--stage", action="append", help="only these stages (repeat or comma-separate), e.g. weights,top_k")
    p.add_argument(
        "--max-full",
        type=Number(int, 0, 10_000_000),
        default=128,
        help="print tensors up to this many values in full (default 128)",
    )
    p.add_argument(
        "--json",
        metavar="FILE",
        type=output_file,
        help="also write the trace as JSON to FILE (a new file): what is printed (--layer, --head and --stage's "
        "selection)",
    )
    add(p, "--overwrite", overwrite={"flag": "--json"})
    p.set_defaults(func=run)


def run(args) -> int:
    if args.json:  # before the model is loaded
        from tformer.outputs import check_output

        check_output(args.json, "--json", [("--model", args.model)], args.overwrite)
    stages = _stages(args.stage)
    trace = build_trace(args)
    try:
        text = trace.format(layer=args.layer, head=args.head, stages=stages, max_full=args.max_full)
    except ValueError as err:
        raise flag_words(err) from None
    print(text)
    if args.json:
        print(f"wrote {trace.to_json(args.json, layer=args.layer, head=args.head, stages=stages)}")  # as printed
    return 0


def flag_words(err: ValueError) -> ValueError:
    """The library's refusal of a trace's ``head`` or ``stages`` in the command line's words: ``--head``, ``--stage``."""
    return ValueError(re.sub(r"^(head|layer)\b", r"--\1", re.sub(r"^stages:", "--stage:", str(err))))


def _stages(given: list[str] | None) -> list[str] | None:
    """``--stage`` (repeated or comma-separated) as a list of names; one that names none is refused, not ignored."""
    if given is None:
        return None
    stages = [s.strip() for item in given for s in item.split(",") if s.strip()]
    if not stages:
        from tformer.inspection.tracing import STAGES

        raise ValueError(f"--stage {','.join(given)!r} names no stage; choose from {', '.join(STAGES)}")
    return stages


def build_trace(args, own_target: bool = False):
    """Load the model (or build the toy), tokenize the input and trace it. ``own_target``: a translator given no
    target reads its own greedy translation (``plot attention``: cross-attention rows for the words it wrote)."""
    from tformer.inspection import toy_seq2seq, trace
    from tformer.tokens import TRANSLATION_EOS

    candidates = getattr(args, "candidates", 5)  # plot attention shows no candidates
    steps = getattr(args, "max_new_tokens", 0)  # plot attention: the input alone
    steps = steps if steps is not None else (5 if args.toy else 20)
    if steps < 0:
        raise ValueError(f"--max-new-tokens must be >= 0, got {steps}")
    _one_input_each(args)
    if args.toy:
        return toy_seq2seq().trace(k=candidates, max_new_tokens=steps)
    from tformer.bert.fill_mask import no_head, untrained_heads
    from tformer.loader import load

    loaded = load(args.model, flag="--model", strict=False)  # any family and directory, its tokenizers (ids that fit)
    _for_this_family(args, loaded.family)
    extra = {} if loaded.family == "bert" else {"max_new_tokens": steps}
    inputs = _inputs(loaded, args)
    if own_target and loaded.family == "seq2seq" and not _given(args, "target", "target_ids"):
        inputs.update(_own_translation(loaded, inputs))
    result = trace(loaded.model, **inputs, k=candidates, **extra)
    if "mlm_head" in untrained_heads(loaded):  # its logits are a random head's: no predictions shown as if real
        result.top_k = []
        print(f"tformer trace: note: {no_head(loaded, 'mlm_head')}; its logits are a random head's", file=sys.stderr)
    made, eos = len(result.steps), inputs.get("eos_id")
    eos = TRANSLATION_EOS if eos is None and loaded.family == "seq2seq" else eos  # greedy_steps' own default
    if extra and made < steps and not (made and result.steps[-1]["id"] == eos):  # cut by the context, not ended
        held = f", the prompt holds {len(inputs['ids'])}" if "ids" in inputs else ""
        print(
            f"tformer trace: note: generation stopped after {made} of {steps} step(s): the model's context is "
            f"{loaded.model.config.max_len} tokens{held}",
            file=sys.stderr,
        )
    return result


def _own_translation(loaded, inputs: dict) -> dict:
    """The decoder's input for a translator given no target: its start and its own greedy translation (the end token
    left out: the last row is the query that wrote it), said on stderr."""
    from tformer.inspection.decoding import greedy_steps
    from tformer.tokens import TRANSLATION_EOS

    start, eos = inputs["tgt_ids"][0], inputs["eos_id"]
    steps = greedy_steps(
        loaded.model, inputs["src_ids"], loaded.model.config.max_len - 1, k=1, eos_id=eos, start_id=start
    )
    ids = [step["id"] for step in steps]
    ids = ids[:-1] if ids and ids[-1] == (TRANSLATION_EOS if eos is None else eos) else ids
    tgt = loaded.target_tokenizer
    said = tgt.decode(ids) if tgt is not None else " ".join(map(str, ids))
    print(
        f"tformer plot attention: note: no --target: the decoder reads the model's own translation, {said!r}",
        file=sys.stderr,
    )
    return dict(tgt_ids=[start, *ids], tgt_tokens=_names(tgt, [start, *ids]))


def _given(args, *names: str) -> list[str]:
    """The input flags among ``names`` that were given (``text`` is TEXT)."""
    flag = {"text": "TEXT"}
    return [flag.get(n, "--" + n.replace("_", "-")) for n in names if getattr(args, n, None) is not None]


def _one_input_each(args) -> None:
    """One input, one target, each given once: two of them would have one used and the other ignored in silence."""
    for group in (("text", "prompt", "ids"), ("target", "target_ids")):
        given = _given(args, *group)
        if len(given) > 1:
            raise ValueError(f"{' and '.join(given)} were both given: give the input one way")
    if args.toy and (given := _given(args, "text", "prompt", "ids", "target", "target_ids")):
        raise ValueError(f"--toy traces the notes' 'I am good .', its own input: leave out {', '.join(given)}")


def _for_this_family(args, family: str) -> None:
    """The flags that only a translator (a target) or only a generating model (new tokens) reads."""
    if family != "seq2seq" and (given := _given(args, "target", "target_ids")):
        raise ValueError(f"{given[0]} is a translation model's decoder input; --model {args.model!r} is a {family}")
    if family == "bert" and getattr(args, "max_new_tokens", None) is not None:
        raise ValueError(f"--max-new-tokens: --model {args.model!r} is a BERT, which does not generate")


def _parse_ids(text: str, flag: str, vocab_size: int) -> list[int]:
    try:
        ids = [int(t) for t in text.split()]
    except ValueError:
        raise ValueError(f"{flag} must be space-separated integers, got {text!r}") from None
    bad = [i for i in ids if not 0 <= i < vocab_size]
    if bad:
        raise ValueError(f"{flag} holds the id {bad[0]}, outside the model's vocabulary [0, {vocab_size})")
    return ids


def _encoded(loaded, text: str | None, target: str | None = None) -> dict[str, list[int]]:
    """The ids of ``text`` (and a translator's ``target``) as the model reads them (:meth:`Loaded.encode`: the
    specials it was trained with), or one line saying what is missing."""
    if text is None:
        raise ValueError("give the input as TEXT (or --prompt), or as --ids")
    if loaded.tokenizer is None:
        raise ValueError(f"{loaded.missing}: pass the input as space-separated --ids")
    return {name: t[0].tolist() for name, t in loaded.encode(text, target).items()}


def _names(tok, ids: list[int]) -> list[str] | None:
    return None if tok is None else [tok.id_to_token(i) or str(i) for i in ids]


def _inputs(loaded, args) -> dict:
    """The trace's inputs: ids from the tokenizers (or --ids / --target-ids), the piece each id stands for, the
    target vocabulary."""
    text = args.text if args.text is not None else args.prompt
    src_tok, tgt_tok = loaded.tokenizer, loaded.target_tokenizer
    vocab = tgt_tok.vocabulary() if tgt_tok is not None else None
    if loaded.family == "seq2seq":
        if args.ids is not None:
            src_ids = _parse_ids(args.ids, "--ids", loaded.model.config.src_vocab_size)
            src_tokens = _names(src_tok, src_ids)  # the pieces they stand for, where there is a tokenizer
        else:
            src_ids = _encoded(loaded, text)["src"]
            src_tokens = _names(src_tok, src_ids)
        if args.target_ids is not None:
            tgt_ids = _parse_ids(args.target_ids, "--target-ids", loaded.model.config.tgt_vocab_size)
            tgt_tokens = _names(tgt_tok, tgt_ids)
        else:
            if args.target is not None and tgt_tok is None:
                raise ValueError(f"{loaded.missing}: pass --target as space-separated --target-ids")
            tgt_ids = loaded.target_ids(args.target)  # <sos> + the target's pieces (teacher forcing)
            tgt_tokens = _names(tgt_tok, tgt_ids)
        ends = dict(start_id=loaded.start_id, eos_id=None if tgt_tok is None else tgt_tok.eos_id)  # a Marian's too
        return dict(src_ids=src_ids, tgt_ids=tgt_ids, src_tokens=src_tokens, tgt_tokens=tgt_tokens, vocab=vocab, **ends)
    if args.ids is not None:
        ids = _parse_ids(args.ids, "--ids", loaded.model.config.vocab_size)
        tokens = _names(src_tok, ids)
    else:
        ids = _encoded(loaded, text)["ids"]
        tokens = _names(src_tok, ids)
    inputs = dict(ids=ids, tokens=tokens, vocab=vocab)
    if loaded.family == "gpt" and src_tok is not None and src_tok.eos_id is not None:
        inputs["eos_id"] = src_tok.eos_id
    return inputs
