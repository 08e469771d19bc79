"""Declared roles: ``g: f32[D] @gain`` on a group's field or a ``param`` input says how the
parameter starts (`adcompiler.training.init`), over the role read from its uses.

The function's ``roles`` attribute maps each IR input with a declared role to it
(``{"m.l1.W": "weight"}``); an input passed to a function whose parameter declares a role
takes that role. A role that is not one of `ROLES`, two roles on one
declaration, a role on a data or state input or on a group, and a tensor passed to a call
whose parameter declares another role are errors at the annotation or the call.
"""
from __future__ import annotations

import difflib

from . import ast
from ...ops.registry import has_trait

ROLES = ("gain", "bias", "weight", "embedding")


def declared_role(t: ast.TypeExpr, error) -> str | None:
    """The role written after type `t`, or None; `error(msg, span)` makes the error."""
    if not t.roles:
        return None
    (first, _), *rest = t.roles
    for name, span in [t.roles[0]] + rest:
        if name not in ROLES:
            close = difflib.get_close_matches(name, ROLES, 1)
            hint = f"; did you mean '@{close[0]}'?" if close else ""
            raise error(f"unknown role '@{name}' (roles: {', '.join('@' + r for r in ROLES)})"
                        f"{hint}", span)
    if rest:
        name, span = rest[0]
        raise error(f"conflicting roles: '@{first}' and '@{name}' on one declaration (a "
                    "parameter has one role)", span)
    return first


def no_role(t: ast.TypeExpr, what: str, error) -> None:
    """Refuse a role where none has a meaning (`what` says where)."""
    if t.roles:
        name, span = t.roles[0]
        raise error(f"'@{name}': {what}", span)


def check_call_roles(module) -> None:
    """Roles across calls: an input passed to a parameter of a called function that declares
    a role takes that role when it has none of its own (through helpers that do not mark
    their inputs ``param``, to a fixed point; initialization asks only for the params'); a
    role declared, or taken from another call, that differs is an error at the call."""
    from ...diagnostics import AdcError
    taken: dict = {}   # (function, input) -> the callee it took its role from
    changed = True
    while changed:
        changed = False
        for fn in module.functions.values():
            mine = dict(fn.attrs.get("roles", {}))
            by_value = {a: a.name for a in fn.body.args}
            for op in fn.walk():
                callee = module.functions.get(op.attrs.get("callee")) \
                    if has_trait(op, "calls") else None
                theirs = callee.attrs.get("roles", {}) if callee is not None else {}
                for v, param in zip(op.operands, callee.arg_names if theirs else ()):
                    while getattr(v, "defining_op", None) is not None and \
                            has_trait(v.defining_op, "view"):   # a layer of a stacked leaf
                        v = v.defining_op.operands[0]
                    name = by_value.get(v)
                    if name is None or param not in theirs:
                        continue
                    if name not in mine:
                        mine[name] = theirs[param]
                        taken[fn.name, name] = callee.name
                        changed = True
                    elif mine[name] != theirs[param]:
                        how = f"takes @{mine[name]} from '{taken[fn.name, name]}'" \
                            if (fn.name, name) in taken else f"is declared @{mine[name]}"
                        raise AdcError(f"'{name}' {how}, but '{callee.name}' declares its "
                                       f"input '{param}' @{theirs[param]}", op.loc)
            if mine:
                fn.attrs["roles"] = mine
