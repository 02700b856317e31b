"""Markup comes from templates only: the Jinja2 environment that renders the HTML report and its SVG
charts, with autoescaping on for every template.

A report is untrusted data (reports travel between machines, and `vitexport report` reads files it
did not write), so every value a template prints is escaped unless the template itself is the
source of the markup. Nothing in vitexport builds markup by formatting report data into strings.
The templates are package data (vitexport/report/templates/), read through importlib.resources;
jinja2 is imported on the first page rendered, never at start-up.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any

TEMPLATES = "templates"


def _source(name: str) -> str | None:
    """A template's text from the package, or None (Jinja then says which name is missing)."""
    file = resources.files("vitexport.report").joinpath(TEMPLATES, name)
    return file.read_text(encoding="utf-8") if file.is_file() else None


def asset(name: str) -> Any:
    """The page's own style or script (vitexport/report/assets/), inlined as it is: files shipped
    with vitexport, never report data, and escaping would break their `>` and `&&`."""
    from markupsafe import Markup

    return Markup(resources.files("vitexport.report").joinpath("assets", name).read_text(encoding="utf-8"))


def _text(value: Any) -> Any:
    # A missing value prints as nothing, not as "None".
    return "" if value is None else value


@lru_cache(maxsize=1)
def environment():
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(_source),
        autoescape=True,  # every template is HTML or SVG: no name decides whether text is escaped
        undefined=jinja2.StrictUndefined,  # a misspelt field fails the render instead of printing nothing
        finalize=_text,
        trim_blocks=True, lstrip_blocks=True,
    )
    env.filters["fmt"] = format  # {{ value|fmt(".3f") }}: numbers as Python's format() writes them
    env.globals["asset"] = asset
    return env


def render(name: str, **context: Any) -> str:
    """The template `name` rendered with `context`; every value it prints is escaped."""
    return environment().get_template(name).render(**context)
