"""``tformer explore --export page.html``: one self-contained HTML file, the answers embedded, no server needed.

The page's own files (``static/index.html``, the scripts and styles it names, and its modules: see
:func:`inline_page`) are inlined, and the answers to a fixed set of requests are embedded as
``<script type="application/json" id="tformer-data">``:
``{"exported": true, "answers": {"<name> <canonical JSON of params>": answer, ...}}``. The set: ``info``, every
request of ``info.defaults`` (the default trace, greedy and beam decoding, sampling, fill-mask, NSP, as the
family has them), and every tensor of the default trace (whole when small, else the rows the page shows first;
``info.export`` says what was left out).
The page reads the answers instead of calling the server, so it opens from ``file://`` with no network.
The page's header names the model by its directory and path; ``name`` and ``source`` replace them in an export,
where a local path (often a temporary one) means nothing to whoever opens the page (the lessons name their models).

Dimension legend: none (files and JSON).
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from tformer.explore.server import PLACEHOLDER, static_dir, static_files
from tformer.explore.session import Session
from tformer.outputs import write_output

__all__ = ["request_key", "export_answers", "export_html", "inline_page", "write_export"]

SOME_ROWS = 8  # a tensor too big for one answer is exported as its rows 0..7 and its last row, as the page asks
EXPORT_TENSOR_VALUES = 1 << 14  # an export holds a tensor whole up to this many values (batch 0), else SOME_ROWS
EXPORT_TARGET_TOKENS = 32  # seq2seq: the default trace follows at most this many tokens of the greedy translation


def request_key(name: str, params: dict) -> str:
    """``name`` + space + the params as JSON with sorted keys and no spaces (whole floats written as integers)."""

    def canon(v: Any) -> Any:
        if isinstance(v, float) and v.is_integer():
            return int(v)
        return {k: canon(x) for k, x in v.items() if x is not None} if isinstance(v, dict) else v

    return f"{name} " + json.dumps(canon(params), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def export_answers(session: Session, name: str | None = None, source: str | None = None) -> dict[str, Any]:
    """The answers an exported page needs, keyed by :func:`request_key`; ``name`` and ``source``, when given, are
    what ``info`` says in place of the model directory's name and path (the page's header shows them).

    The file stays small (a few MB) for any model: the default trace of a translation model follows at most
    :data:`EXPORT_TARGET_TOKENS` of its greedy translation (an untrained one never stops), and a tensor over
    :data:`EXPORT_TENSOR_VALUES` values is stored as the rows the page shows first. ``info.export`` says what was
    left out, and ``info.max_tensor_values`` is the export's limit, so that the page asks for those rows."""
    other = session.other.m if session.other is not None else None
    shown = replace(session.m, name=name or session.m.name, source=source or session.m.source)
    session = Session(shown, other, target_cap=EXPORT_TARGET_TOKENS)  # a fresh one: its traces are the export's
    answers: dict[str, Any] = {}

    def ask(name: str, params: dict) -> Any:
        answers[request_key(name, params)] = answer = session.call(name, dict(params))
        return answer

    info = ask("info", {})
    limit = min(int(info["max_tensor_values"]), EXPORT_TENSOR_VALUES)
    info["max_tensor_values"] = limit
    partial: list[int] = []  # steps of the default trace kept as some rows
    exported: set[str] = set()  # trace ids whose tensors are in
    for request, params in info["defaults"].items():
        name = "decode" if request == "beam" else request
        answer = ask(name, params)
        traces = [answer] if name == "trace" else [answer["a"], answer["b"]] if name == "compare" else []
        for trace in traces:  # the first of compare is the default trace when its text is
            if trace["trace_id"] not in exported:
                exported.add(trace["trace_id"])
                cut = _tensors(ask, trace, limit)
                partial += cut if name == "trace" else []
        if name == "compare":  # and b − a of every step whose shapes match
            same = {d["id"] for d in answer["diff"] if d["shape_a"] == d["shape_b"]}
            pairs = {"trace_a": answer["a"]["trace_id"], "trace_b": answer["b"]["trace_id"]}
            steps = {"steps": [s for s in answer["a"]["steps"] if s["id"] in same]}
            _tensors(ask, steps, limit, "tensor_diff", **pairs)
    info["export"] = _left_out(session, answers, info, limit, partial)
    return answers


def _left_out(session: Session, answers: dict, info: dict, limit: int, partial: list[int]) -> dict:
    """``info.export``: the export's limits and, in one sentence for the page, what they left out."""
    trace = answers[request_key("trace", info["defaults"]["trace"])]
    decoder = trace["tokens"].get("decoder", [])
    cut = info["family"] == "seq2seq" and "target" not in info["defaults"]["trace"]
    cut = cut and len(decoder) - 1 >= session.target_cap  # the greedy translation reached the cap
    notes = []
    if cut:
        notes.append(f"the traced translation is its first {session.target_cap} tokens")
    if partial:
        notes.append(
            f"{len(partial)} steps over {limit:,} values keep only rows 0–{SOME_ROWS - 1} and the last "
            "(tformer explore --model DIR shows them whole)"
        )
    return dict(
        max_tensor_values=limit,
        target_tokens=session.target_cap if cut else None,
        partial_steps=partial,
        note="not in this export: " + "; ".join(notes) if notes else "",
    )


def _tensors(ask, trace: dict, limit: int, name: str = "tensor", **params: Any) -> list[int]:
    """Every step's tensor (or, with ``name="tensor_diff"``, difference): whole when it fits ``limit``, else
    the rows the page asks for (0..7 and the last, one request each). No per-head copies: the page slices them.
    Returns the ids of the steps kept as rows."""
    partial = []
    for step in trace["steps"]:
        key = {**params, "id": step["id"]} if params else {"trace_id": trace["trace_id"], "id": step["id"]}
        shape = step["shape"][1:] if step["dims"][0] == "B" else step["shape"]
        if _numel(shape) <= limit or len(shape) < 2:
            ask(name, key)
        else:
            n = shape[-2]
            partial.append(step["id"])
            for row in sorted({*range(min(n, SOME_ROWS)), n - 1}):
                ask(name, {**key, "row": row})
    return partial


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


_SCRIPT = re.compile(r"<script\b([^>]*)\bsrc=[\"']([^\"']+)[\"']([^>]*)>\s*</script>", re.IGNORECASE)
_LINK = re.compile(r"<link\b[^>]*>", re.IGNORECASE)
_IMPORT_MAP = re.compile(r"(<script\b[^>]*\btype=[\"']?importmap[\"']?[^>]*>)(.*?)(</script>)", re.IGNORECASE | re.S)


def export_html(
    session: Session, static: Path | None = None, name: str | None = None, source: str | None = None
) -> str:
    """The page with its scripts and styles inlined and the answers embedded (``name``, ``source``:
    :func:`export_answers`)."""
    page = inline_page(static if static is not None else static_dir())
    data = {"exported": True, "answers": export_answers(session, name, source)}
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")  # no </script> inside
    embedded = f'<script type="application/json" id="tformer-data">{text}</script>\n'
    at = page.lower().find("<script")  # before the page's own scripts, which read it when they start
    if at < 0:
        at = page.lower().find("</body>")
    return page[:at] + embedded + page[at:] if at >= 0 else page + embedded


def inline_page(folder: Path) -> str:
    """``folder``'s index.html with every file of ``folder`` it uses written into it: no file, no network needed.

    ``<script src>`` and ``<link rel=stylesheet>`` naming a file of ``folder`` become inline scripts and styles. The
    page's modules are imported by name through its import map (``"explore/": "./js/"``); that map is rewritten to
    give each module under the folder it names as a ``data:`` URL of the module's own text. A browser refuses to
    import files from a ``file://`` page, but it imports ``data:`` URLs, and every import of a name gets the one
    module, as it does from the server."""
    page_file = folder / "index.html"
    page = page_file.read_text(encoding="utf-8") if page_file.is_file() else PLACEHOLDER
    files = static_files(folder)

    def local(ref: str) -> Path | None:
        if re.match(r"^[a-z]+:|^//", ref, re.IGNORECASE):
            return None
        name = ref.removeprefix("./").lstrip("/")
        return files.get(name) or files.get(name.removeprefix("static/"))

    def script(m: re.Match) -> str:
        path = local(m.group(2))
        if path is None:
            return m.group(0)
        code = path.read_text(encoding="utf-8").replace("</script", "<\\/script")
        return f"<script{m.group(1)}{m.group(3)}>\n{code}\n</script>"

    def link(m: re.Match) -> str:
        tag = m.group(0)
        href = re.search(r"\bhref=[\"']([^\"']+)[\"']", tag)
        path = local(href.group(1)) if href and re.search(r"\brel=[\"']?stylesheet", tag) else None
        if path is None:
            return tag
        return "<style>\n" + path.read_text(encoding="utf-8").replace("</style", "<\\/style") + "\n</style>"

    def import_map(m: re.Match) -> str:
        imports = {}
        for name, ref in json.loads(m.group(2)).get("imports", {}).items():
            if name.endswith("/"):  # a folder: each of its modules by its own name
                folder_name = ref.removeprefix("./").lstrip("/").removeprefix("static/")
                for rel, path in files.items():
                    if rel.startswith(folder_name) and rel.endswith(".js"):
                        imports[name + rel.removeprefix(folder_name)] = _data_url(path)
            else:
                one = local(ref)
                imports[name] = _data_url(one) if one is not None else ref
        return m.group(1) + json.dumps({"imports": imports}, indent=1) + m.group(3)

    return _IMPORT_MAP.sub(import_map, _LINK.sub(link, _SCRIPT.sub(script, page)))


def _data_url(path: Path) -> str:
    """A module's text as a ``data:`` URL (base64: nothing in it can end the page's ``<script>``)."""
    return "data:text/javascript;charset=utf-8;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def write_export(
    session: Session,
    path: str | Path,
    static: Path | None = None,
    name: str | None = None,
    source: str | None = None,
) -> Path:
    """Write :func:`export_html` to ``path`` (atomically, readable as any file ``open()`` makes: a page to hand
    out, not a private temp file); returns the path. ``name`` and ``source`` name the model on the page in place of
    its directory's name and path."""
    html = export_html(session, static, name, source)
    return write_output(path, lambda tmp: Path(tmp).write_text(html, encoding="utf-8"))
