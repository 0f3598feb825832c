"""What tformer's lessons need from the site beyond MyST-NB, as one small Sphinx extension.

* **A notebook of every lesson.** Each lesson is a MyST markdown notebook (``lessons/LANG/NN-name.md``); the build
  writes its ``.ipynb`` with jupytext to ``notebooks/LANG/NN-name.ipynb`` on the site, and the page links to it.
* **English and Korean in one site.** ``lessons/en/NAME`` and ``lessons/ko/NAME`` are the same lesson: each page
  links to the other when it exists. A Korean page names in its front matter the English revision it follows
  (``follows: <git revision>``); the page shows it, and says so when the English lesson changed after it.
  Korean pages (and any page whose front matter says ``language: ko``) are marked ``lang="ko"``.
* **The explorer inside the lessons.** ``tformer explore --export`` writes the explorer's self-contained page of the
  notes' toy model to ``_static/explore/toy.html`` during the build (in parallel with the lessons' execution), so the
  lessons embed the very model they compute with, offline. A lesson that trains its own model exports it itself:
  its code writes ``NN-name.html`` into the folder named by the environment variable ``TFORMER_LESSON_EXPORTS``
  (set here to ``_static/explore/`` of the build; a learner running the notebook gets ``runs/lessons/``). A lesson
  served from the execution cache does not run, so when a page it embeds is missing its cached results are
  dropped and it runs again; after the lessons ran, an embedded page that is still missing is a warning.
* **One run per lesson, not per language.** A Korean lesson runs the English lesson's code (``tests/test_lessons.py``
  holds its code cells to the English ones' Python tokens; only the comments differ), so the English run's outputs
  are its outputs: just before a Korean lesson is read, they are cached under its notebook, and MyST-NB takes them
  from the cache instead of running the same code a second time. A Korean lesson whose code differs runs itself.
* **Formulas offline.** MathJax's one-file SVG build is copied from the ``django-static-mathjax`` package into
  ``_static/mathjax/``; nothing is fetched from a CDN.
* **A time limit per lesson.** A lesson whose execution took longer than ``lesson_time_limit`` seconds is a
  warning, so an error in the strict build. (MyST-NB's own limit, ``nb_execution_timeout``, is per cell.)
* **Offline, checked.** After the build, any page that loads a script, style, frame or image from an http(s)
  address is a warning too: the site must work with no network.
"""

from __future__ import annotations

import copy
import html
import importlib.util
import io
import os
import re
import shutil
import subprocess
import sys
import tokenize
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.util import logging

logger = logging.getLogger(__name__)

LESSON = re.compile(r"^lessons/(?P<lang>en|ko)/(?P<name>\d\d-[a-z0-9-]+)$")  # a lesson's docname
LANGUAGES = {"en": "English", "ko": "한국어"}
EXPORT = "explore/toy.html"  # under _static/
EXPORTS_ENV = "TFORMER_LESSON_EXPORTS"  # where a lesson writes the explorer's page of the model it trained
EMBEDDED = re.compile(r"_static/explore/([\w.-]+)\.html")  # an explorer page a lesson embeds
REMOTE = re.compile(r"<(script|link|iframe|img)\b[^>]*\b(src|href)=[\"']?(https?:)?//", re.IGNORECASE)


def lessons_in(srcdir: Path, lang: str) -> list[Path]:
    """The lesson sources of one language, in order."""
    return sorted(p for p in (srcdir / "lessons" / lang).glob("[0-9][0-9]-*.md"))


def front_matter(path: Path) -> str:
    """The YAML front matter of a MyST file as text ('' if none)."""
    text = path.read_text(encoding="utf-8")
    if not text.startswith("---\n"):
        return ""
    end = text.find("\n---", 4)
    return text[4:end] if end > 0 else ""


def follows(path: Path) -> str | None:
    """The English revision a Korean lesson follows: its front matter's ``follows:`` line."""
    match = re.search(r"^follows:\s*['\"]?([0-9a-f]{7,40})", front_matter(path), re.MULTILINE)
    return match.group(1) if match else None


# ---------------------------------------------------------------------------------------------- builder-inited
def prepare(app: Sphinx) -> None:
    """Make the generated files: MathJax, the notebooks, and start the explorer's export."""
    generated = Path(app.config.lessons_generated)
    static, extra = generated / "static", generated / "extra"
    for folder in (static, extra):
        folder.mkdir(parents=True, exist_ok=True)
    copy_mathjax(static / "mathjax")
    write_notebooks(Path(app.srcdir), extra / "notebooks")
    out = static / EXPORT
    out.parent.mkdir(parents=True, exist_ok=True)
    os.environ[EXPORTS_ENV] = str(out.parent)  # the lessons' kernels inherit it
    rerun_lessons_missing_exports(app, out.parent)
    command = [sys.executable, "-m", "tformer", "explore", "--export", str(out), "--overwrite"]
    logger.info("lessons: %s (in the background)", " ".join(command[1:]))
    app.lessons_export = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # type: ignore[attr-defined]


def copy_mathjax(folder: Path) -> None:
    """MathJax 3's ``tex-svg.js`` (TeX in, SVG out, fonts built in) from the ``django-static-mathjax`` package."""
    spec = importlib.util.find_spec("mathjax")
    source = None
    if spec is not None and spec.submodule_search_locations:
        source = Path(spec.submodule_search_locations[0]) / "static" / "mathjax" / "es5" / "tex-svg.js"
    if source is None or not source.is_file():
        raise ExtensionError("lessons: MathJax not found; install the docs extra: pip install -e '.[docs]'")
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source, folder / "tex-svg.js")


def write_notebooks(srcdir: Path, folder: Path) -> None:
    """Each lesson as an .ipynb (inputs only: the site shows the outputs, the learner makes their own)."""
    import jupytext

    for lang in LANGUAGES:
        for path in lessons_in(srcdir, lang):
            out = folder / lang / f"{path.stem}.ipynb"
            out.parent.mkdir(parents=True, exist_ok=True)
            notebook = jupytext.read(path)
            notebook.metadata.pop("jupytext", None)  # a plain notebook, not paired with the .md
            jupytext.write(notebook, out, fmt="ipynb")


def lesson_exports(srcdir: Path) -> dict[Path, list[str]]:
    """The explorer pages each lesson embeds and writes itself (every one but the toy's), by lesson source."""
    found = {}
    for lang in LANGUAGES:
        for path in lessons_in(srcdir, lang):
            names = sorted(set(EMBEDDED.findall(path.read_text(encoding="utf-8"))) - {Path(EXPORT).stem})
            if names:
                found[path] = names
    return found


def rerun_lessons_missing_exports(app: Sphinx, folder: Path) -> None:
    """Drop the cached execution of each lesson whose explorer page is missing, so that it runs and writes it."""
    from jupyter_cache import get_cache

    missing = {
        str(path)
        for path, names in lesson_exports(Path(app.srcdir)).items()
        if not all((folder / f"{name}.html").is_file() for name in names)
    }
    cache_path = Path(app.config.nb_execution_cache_path)
    if not missing or not cache_path.is_dir():
        return
    cache = get_cache(cache_path)
    for record in cache.list_cache_records():
        if record.uri in missing:
            logger.info("lessons: %s runs again: the explorer page it writes is missing", record.uri)
            cache.remove_cache(record.pk)


# ---------------------------------------------------------------------------------------------- source-read
def code_tokens(source: str) -> list[tuple[int, str]] | None:
    """A cell's Python tokens, comments and blank lines left out (None where it is not plain Python: a magic, say)."""
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.ENCODING}
    try:
        return [
            (t.type, t.string) for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type not in skip
        ]
    except (tokenize.TokenError, SyntaxError):
        return None


def same_code(korean: Any, english: Any) -> bool:
    """Whether two notebooks run the same code: as many code cells, each with the same tokens and metadata."""
    ko = [c for c in korean.cells if c.cell_type == "code"]
    en = [c for c in english.cells if c.cell_type == "code"]
    return len(ko) == len(en) and all(
        k.metadata == e.metadata and (tokens := code_tokens(k.source)) is not None and tokens == code_tokens(e.source)
        for k, e in zip(ko, en)
    )


def share_outputs(cache: Any, korean: Any, english: Any, uri: str) -> bool:
    """Cache the Korean notebook with the outputs of the English one's cached run, where they run the same code.
    False (nothing cached) where the English lesson has no cached run or the code differs."""
    from jupyter_cache.base import CacheBundleIn

    try:
        record = cache.match_cache_notebook(english)
    except KeyError:
        return False  # the English lesson has not run (or failed): the Korean one runs itself
    ran = cache.get_cache_bundle(record.pk).nb
    if not same_code(korean, ran):
        return False
    notebook = copy.deepcopy(korean)
    outputs = iter(c for c in ran.cells if c.cell_type == "code")
    for cell in notebook.cells:
        if cell.cell_type == "code":
            done = next(outputs)
            cell.outputs, cell.execution_count = done.outputs, done.execution_count
    if "language_info" in ran.metadata:
        notebook.metadata["language_info"] = ran.metadata["language_info"]
    data = {**(record.data or {}), "outputs_of": record.uri}  # (its execution_seconds: the time limit applies)
    cache.cache_notebook_bundle(CacheBundleIn(notebook, uri, data=data), check_validity=False, overwrite=True)
    return True


def english_outputs_for_korean(app: Sphinx, docname: str, source: list[str]) -> None:
    """Before MyST-NB reads a Korean lesson: give it the English lesson's outputs when both run the same code (the
    English lessons are read first: Sphinx reads documents in sorted order, and ``en`` comes before ``ko``)."""
    match = LESSON.match(docname)
    if not match or match["lang"] != "ko" or app.config.nb_execution_mode != "cache":
        return
    english = Path(app.srcdir) / "lessons" / "en" / f"{match['name']}.md"
    if not english.is_file():
        return
    from jupyter_cache import get_cache
    from myst_nb.core.read import create_nb_reader

    def read(path: Path, text: str) -> Any:  # the notebook MyST-NB itself reads, so the cache's hashes match
        reader = create_nb_reader(str(path), app.env.myst_config, app.env.mystnb_config, text)
        return None if reader is None else reader.read(text)

    korean_path = Path(app.env.doc2path(docname))
    korean, original = read(korean_path, source[0]), read(english, english.read_text(encoding="utf-8"))
    if korean is None or original is None:
        return
    cache = get_cache(app.config.nb_execution_cache_path)
    try:
        cache.match_cache_notebook(korean)
        return  # cached already (shared by an earlier build, or run)
    except KeyError:
        pass
    if share_outputs(cache, korean, original, str(korean_path)):
        logger.info("lessons: %s shows the outputs of lessons/en/%s (the same code)", docname, match["name"])
        app.env.lessons_shared = {*getattr(app.env, "lessons_shared", ()), docname}  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------- env-updated
def finish_export(app: Sphinx, env: Any) -> None:
    """Wait for the explorer's export (the site's static files are copied right after the documents are read)."""
    process = getattr(app, "lessons_export", None)
    if process is None:
        return
    output, _ = process.communicate(timeout=300)
    app.lessons_export = None  # type: ignore[attr-defined]
    if process.returncode != 0:
        raise ExtensionError(f"lessons: tformer explore --export failed ({process.returncode}):\n{output}")
    logger.info("lessons: %s", output.strip())


def check_times(app: Sphinx, env: Any) -> None:
    """A warning (an error in the strict build) for each lesson that ran longer than ``lesson_time_limit``."""
    limit = app.config.lesson_time_limit
    for docname, data in sorted(getattr(env, "nb_metadata", {}).items()):
        runtime = (data.get("exec_data") or {}).get("runtime")
        if LESSON.match(docname) and runtime is not None:
            if docname in getattr(env, "lessons_shared", ()):
                logger.info("lessons: %s did not run: the English lesson ran in %.1f s", docname, runtime)
            else:
                logger.info("lessons: %s executed in %.1f s", docname, runtime)
            if runtime > limit:
                logger.warning("lesson %s took %.0f s to execute, over the limit of %d s", docname, runtime, limit)


def check_exports(app: Sphinx, env: Any) -> None:
    """A warning for each explorer page a lesson embeds that its execution did not write."""
    folder = Path(app.config.lessons_generated) / "static" / Path(EXPORT).parent
    for path, names in sorted(lesson_exports(Path(app.srcdir)).items()):
        for name in names:
            if not (folder / f"{name}.html").is_file():
                logger.warning(
                    "lesson %s embeds _static/explore/%s.html, but running it wrote no %s",
                    path.name,
                    name,
                    folder / f"{name}.html",
                )


# ---------------------------------------------------------------------------------------------- html-page-context
def lesson_bar(app: Sphinx, pagename: str, templatename: str, context: dict, doctree: Any) -> None:
    """The bar above a lesson: its notebook, the same lesson in the other language, a Korean page's revision."""
    if pagename.startswith("lessons/ko/") or (context.get("meta") or {}).get("language") == "ko":
        context["language"] = "ko"  # a Korean lesson, or a page whose front matter says language: ko
    match = LESSON.match(pagename)
    if not match:
        return
    lang, name = match["lang"], match["name"]
    pathto = context["pathto"]
    links = [
        f'<a class="reference download" href="{pathto(f"notebooks/{lang}/{name}.ipynb", 1)}" download>'
        f"{'노트북 (.ipynb) 내려받기' if lang == 'ko' else 'Download this lesson as a notebook (.ipynb)'}</a>"
    ]
    for other, label in LANGUAGES.items():
        if other == lang:
            continue
        if f"lessons/{other}/{name}" in app.env.found_docs:
            links.append(
                f'<a class="reference internal" href="{pathto(f"lessons/{other}/{name}")}" hreflang="{other}">{label}</a>'
            )
        else:
            links.append(f'<span class="lesson-missing" lang="{other}">{label}: {missing_text(other)}</span>')
    if lang == "ko":
        links.append(revision_note(Path(app.srcdir), name))
    context["lesson_bar"] = '<nav class="lesson-bar">' + " · ".join(links) + "</nav>"


def missing_text(lang: str) -> str:
    return "아직 번역되지 않았습니다" if lang == "ko" else "not written yet"


def revision_note(srcdir: Path, name: str) -> str:
    """Which English revision a Korean lesson follows, and whether the English lesson changed since."""
    english = srcdir / "lessons" / "en" / f"{name}.md"
    revision = follows(srcdir / "lessons" / "ko" / f"{name}.md")
    if revision is None:
        return '<span class="lesson-missing">영어 원문의 리비전이 적혀 있지 않습니다</span>'
    note = f"영어 원문 리비전 <code>{html.escape(revision[:10])}</code> 기준"
    try:
        changed = subprocess.run(
            ["git", "log", "--format=%h", f"{revision}..HEAD", "--", str(english)],
            cwd=srcdir,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return note  # no git here (an unpacked archive): the revision alone
    if changed:
        note += f' <span class="lesson-stale">(영어 원문이 그 뒤에 {len(changed)}번 바뀌었습니다)</span>'
    return note


# ---------------------------------------------------------------------------------------------- build-finished
def check_offline(app: Sphinx, exception: Exception | None) -> None:
    """A warning for each built page that would fetch a script, style, frame or image from the network."""
    if exception is not None or app.builder.format != "html":
        return
    for page in sorted(Path(app.outdir).rglob("*.html")):
        for match in REMOTE.finditer(page.read_text(encoding="utf-8")):
            logger.warning("%s loads %s… from the network", page.relative_to(app.outdir), match.group(0)[:80])


def setup(app: Sphinx) -> dict:
    app.add_config_value("lessons_generated", "", "env")
    app.add_config_value("lesson_time_limit", 120, "env")
    app.connect("builder-inited", prepare)
    app.connect("source-read", english_outputs_for_korean)
    app.connect("env-updated", finish_export)
    app.connect("env-updated", check_times)
    app.connect("env-updated", check_exports)
    app.connect("html-page-context", lesson_bar)
    app.connect("build-finished", check_offline)
    return {"parallel_read_safe": False, "parallel_write_safe": True}
