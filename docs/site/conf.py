"""Sphinx configuration of tformer's documentation site: the lessons (executed on every build), the user guide and
the API reference.

Build it with ``bash scripts/docs.sh``: it installs what it needs and runs Sphinx strictly (``-W --keep-going``),
so a warning, a lesson cell that raises or a lesson's failed ``assert`` of a check value fails the build.
Why Sphinx + MyST-NB and MyST markdown lessons: ``about.md``. What ``_ext/lessons.py`` adds: its docstring.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent  # docs/site
ROOT = HERE.parents[1]  # the repository
BUILD = ROOT / "docs" / "_build"  # the site goes to BUILD/html; BUILD/generated holds what the build makes
sys.path.insert(0, str(HERE / "_ext"))

import tformer  # noqa: E402  (after the path: the package comes from the environment, the extension from _ext)

project = "tformer"
author = "the tformer developers"
copyright = "the tformer developers, MIT licence"  # noqa: A001  (Sphinx's name)
release = version = tformer.__version__
language = "en"  # the Korean pages say lang="ko" themselves (lessons.py)

extensions = [
    "myst_nb",  # MyST markdown, and the lessons as notebooks: executed, cached, outputs rendered
    "sphinx.ext.autodoc",  # the API reference from the docstrings
    "sphinx.ext.mathjax",  # formulas, with MathJax served from the site itself
    "lessons",  # _ext/lessons.py
]
templates_path = ["_templates"]
exclude_patterns = ["_build", "lessons/solutions", "**/.ipynb_checkpoints"]

# MyST: $…$ and $$…$$ formulas, ::: fences, GitHub-style heading anchors (the included docs/*.md link to them).
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
myst_heading_anchors = 4

# MyST-NB: execute every lesson, cache the results per lesson (a lesson runs again only when its code changes),
# and fail on the first error. The limit is per cell; lessons.py also limits each lesson's total time.
nb_execution_mode = "cache"
nb_execution_cache_path = str(BUILD / ".jupyter_cache")
nb_execution_timeout = 120
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_merge_streams = True
nb_ipywidgets_js: dict = {}  # no lesson uses widgets: load no require.js from a CDN
lesson_time_limit = 120  # seconds for a whole lesson on CI's 2 cores (lessons.py)

# The API reference: signatures as written, members in source order.
autodoc_member_order = "bysource"
autodoc_typehints = "signature"

html_theme = "furo"
html_title = f"tformer {release}"
# What the build makes (lessons.py): BUILD/generated/static → _static/ (MathJax, the explorer's export of the toy),
# BUILD/generated/extra → the site's root (notebooks/en/NN-name.ipynb, the lessons' downloads).
lessons_generated = str(BUILD / "generated")
for _folder in ("static", "extra"):  # Sphinx checks these paths before any extension runs
    (BUILD / "generated" / _folder).mkdir(parents=True, exist_ok=True)
html_static_path = ["_static", str(BUILD / "generated" / "static")]
html_extra_path = [str(BUILD / "generated" / "extra")]
html_css_files = ["lessons.css", "korean.css"]  # korean.css: the shipped Hangul font (scripts/korean_font.py)
html_show_sourcelink = False
# MathJax's SVG build: one file, no fonts to fetch (copied from the django-static-mathjax package by lessons.py).
mathjax_path = "mathjax/tex-svg.js"
