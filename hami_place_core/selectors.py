"""Kubernetes LabelSelector matching (matchLabels AND matchExpressions), as apimachinery defines it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any


class SelectorError(ValueError):
    """A selector that cannot be evaluated (unknown operator, missing values)."""


def matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str] | None) -> bool:
    """True if `labels` satisfy `selector`. An empty or missing selector matches nothing here:
    a placement must never capture every pod of a namespace by accident (the CRD forbids it too)."""
    if not selector:
        return False
    labels = labels or {}
    match_labels = selector.get("matchLabels") or {}
    exprs = selector.get("matchExpressions") or []
    if not match_labels and not exprs:
        return False
    for k, v in match_labels.items():
        if labels.get(k) != v:
            return False
    for e in exprs:
        key, op, values = e.get("key"), e.get("operator"), e.get("values") or []
        if op == "In":
            if key not in labels or labels[key] not in values:
                return False
        elif op == "NotIn":
            if key in labels and labels[key] in values:
                return False
        elif op == "Exists":
            if key not in labels:
                return False
        elif op == "DoesNotExist":
            if key in labels:
                return False
        else:
            raise SelectorError(f"unknown selector operator {op!r}")
    return True


_SET_RE = re.compile(r"^\s*([^\s!=(),]+)\s+(in|notin)\s+\(([^()]*)\)\s*$")
_EQ_RE = re.compile(r"^\s*([^\s!=(),]+)\s*(==|=|!=)\s*([^\s!=(),]*)\s*$")
_EXISTS_RE = re.compile(r"^\s*(!?)\s*([^\s!=(),]+)\s*$")


def _split_terms(text: str) -> list[str]:
    # commas inside `in (a,b)` do not separate terms
    terms: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    terms.append("".join(cur))
    return [t for t in terms if t.strip()]


def parse_selector(text: str) -> dict[str, Any]:
    """A kubectl `-l` string (``a=b,c!=d,e in (x,y),f notin (z),g,!h``) as a LabelSelector.

    Equality terms become matchLabels; the rest become matchExpressions, in the order given.
    ``c!=d`` is NotIn [d], as apimachinery's parser turns it into a selector that also matches
    pods without the label.
    """
    if not text or not text.strip():
        raise SelectorError("empty label selector")
    match_labels: dict[str, str] = {}
    exprs: list[dict[str, Any]] = []
    for term in _split_terms(text):
        if m := _SET_RE.match(term):
            values = sorted({v.strip() for v in m.group(3).split(",") if v.strip()})
            if not values:
                raise SelectorError(f"selector term {term.strip()!r} lists no values")
            exprs.append({"key": m.group(1), "operator": "In" if m.group(2) == "in" else "NotIn", "values": values})
        elif m := _EQ_RE.match(term):
            key, op, value = m.groups()
            if op == "!=":
                exprs.append({"key": key, "operator": "NotIn", "values": [value]})
            elif key in match_labels and match_labels[key] != value:
                raise SelectorError(f"selector asks {key} to equal both {match_labels[key]!r} and {value!r}")
            else:
                match_labels[key] = value
        elif m := _EXISTS_RE.match(term):
            exprs.append({"key": m.group(2), "operator": "DoesNotExist" if m.group(1) else "Exists"})
        else:
            raise SelectorError(f"cannot parse selector term {term.strip()!r} (use k=v, k!=v, k in (a,b), k, !k)")
    out: dict[str, Any] = {}
    if match_labels:
        out["matchLabels"] = match_labels
    if exprs:
        out["matchExpressions"] = exprs
    return out


def format_selector(selector: Mapping[str, Any] | None) -> str:
    """The inverse of parse_selector, for display (``app=web,tier in (a,b)``)."""
    if not selector:
        return "<none>"
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for e in selector.get("matchExpressions") or ():
        op, key, values = e.get("operator"), e.get("key"), ",".join(e.get("values") or ())
        parts.append(
            {"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})", "Exists": f"{key}"}.get(
                str(op), f"!{key}"
            )
        )
    return ",".join(parts)
