"""Parameter groups: ``group Block { attn: Attn, W1: f32[D, F] }`` and inputs of group type.

A group is a record of named fields, each a tensor type or another group; ``Block[L]`` is L
groups of identical shapes stacked. Groups exist only in the front end: a function input of
group type lowers to one IR input per tensor field (leaf), named by its dotted path
(``p.attn.Wq``), and a stacked group to one input per leaf with the stack axes leading
(``p.blocks.W1: f32[L, D, F]``), as arrays of records are records of arrays. The function's
``stacked`` attribute maps each stacked path to its length (``{"p.blocks": "L"}``), which is
how the library, the files and the command line turn a stacked leaf into the per-layer
paths ``p.blocks.3.W1`` and back (`adcompiler.files.paths`).

In a body, a group is a value that only three things take: a field access (``p.attn``: a
group, or a leaf tensor), an index on a stacked group (``p.blocks[i]``: one layer, chosen at
run time inside a loop that stays a loop), and a call of a function declared to take that
group. Indexing is lazy: ``p.blocks[i].attn.Wq`` emits one ``index`` of the leaf it reads.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from ...diagnostics import AdcError
from ...ir.core import Value
from ...ir.types import DTYPES, TensorType, is_symbol
from . import ast
from .roles import declared_role, no_role


@dataclass(eq=False)
class GroupType:
    """A declared group: its fields in order, each a `TensorType` or a `GroupRef`; `params`
    the names of its dims (``group Linear(I, O)``), `args` what an instance gave them."""

    name: str
    fields: dict = field(default_factory=dict)
    span: ast.Span | None = None
    params: tuple = ()
    args: tuple = ()
    roles: dict = field(default_factory=dict)   # field -> declared role (``@gain``)
    state: dict = field(default_factory=dict)   # state field -> its initial value

    @property
    def label(self) -> str:
        return self.name + (f"({', '.join(map(str, self.args))})" if self.args else "")

    def instance(self, args: tuple) -> "GroupType":
        """This group with its dims given (`args`, one per param)."""
        m = {p: a for p, a in zip(self.params, args) if p != a}
        if not m:
            return self
        return GroupType(self.name, {k: _substitute(t, m) for k, t in self.fields.items()},
                         self.span, self.params, tuple(args), self.roles, self.state)

    def leaves(self, prefix: str = "", stack: tuple = ()) -> list[tuple[str, TensorType]]:
        """``(path, type)`` of every tensor field, nested groups flattened in field order,
        each type with the `stack` axes (and those of stacked sub-groups) leading."""
        out = []
        for name, t in self.fields.items():
            path = f"{prefix}{name}"
            if isinstance(t, TensorType):
                out.append((path, TensorType(t.dtype, tuple(stack) + tuple(t.shape))))
            else:
                out += t.group.leaves(path + ".", tuple(stack) + t.dims)
        return out

    def leaf_roles(self) -> dict:
        """``{path: role}`` of the tensor fields declared with a role, nested ones too."""
        return self._by_leaf("roles", "")

    def leaf_state(self) -> dict:
        """``{path: initial value}`` of the state fields, nested ones too."""
        return self._by_leaf("state", "")

    def _by_leaf(self, attr: str, prefix: str) -> dict:
        """What the dict `attr` (``roles`` or ``state``) says of each tensor field, by path
        through nested groups."""
        out = {}
        for name, t in self.fields.items():
            if isinstance(t, TensorType):
                if name in getattr(self, attr):
                    out[prefix + name] = getattr(self, attr)[name]
            else:
                out.update(t.group._by_leaf(attr, f"{prefix}{name}."))
        return out

    def stacks(self, prefix: str) -> dict:
        """``{path: length}`` of the stacked groups inside this one, paths under `prefix`."""
        out = {}
        for name, t in self.fields.items():
            if isinstance(t, GroupRef):
                path = f"{prefix}.{name}"
                if t.dims:
                    out[path] = t.dims[0]
                out.update(t.group.stacks(path))
        return out


@dataclass(frozen=True, eq=False)
class GroupRef:
    """A group as a type: ``Block`` (`dims` empty) or ``Block[L]`` (L of them stacked)."""

    group: GroupType
    dims: tuple = ()

    def __str__(self) -> str:
        return self.group.label + (f"[{', '.join(map(str, self.dims))}]" if self.dims else "")


def _substitute(t, m: dict):
    """A field type with the dims named in `m` replaced."""
    def sub(dims):
        return tuple(m.get(d, d) if isinstance(d, str) else d for d in dims)
    if isinstance(t, TensorType):
        return TensorType(t.dtype, sub(t.shape))
    inner = t.group
    args = sub(inner.args) if inner.args else ()
    g = GroupType(inner.name, {k: _substitute(f, m) for k, f in inner.fields.items()},
                  inner.span, inner.params, args, inner.roles, inner.state)
    return GroupRef(g, sub(t.dims))


@dataclass(eq=False)
class Decl:
    """A function input as declared: a tensor (`ref` None) or a group, with its IR inputs."""

    name: str
    ref: GroupRef | None
    leaves: list            # (path below the input, TensorType); one ("", type) for a tensor
    span: ast.Span
    is_param: bool
    roles: dict = field(default_factory=dict)   # IR input name -> declared role
    state: dict = field(default_factory=dict)   # IR input name -> initial value

    def flat_names(self) -> list[str]:
        return [f"{self.name}.{p}" if p else self.name for p, _ in self.leaves]


@dataclass(eq=False)
class GroupValue:
    """A group in a function body: its leaves (IR values with every stack axis), the
    indices already chosen on their leading axes (`picks`), the stack axes left (`dims`),
    and how the program wrote it (`text`, for messages)."""

    group: GroupType
    dims: tuple
    leaves: dict            # path below this group -> Value
    picks: tuple            # ints and integer scalar Values, one per axis chosen
    text: str

    def __str__(self) -> str:
        return str(GroupRef(self.group, self.dims))


def resolve_groups(defs, error) -> dict[str, GroupType]:
    """The groups of a module by name, their field types resolved (`error(msg, span)`), a
    group before the groups that contain it."""
    groups: dict[str, GroupType] = {}
    found: dict[str, ast.GroupDef] = {}
    for d in defs:
        if isinstance(d, ast.GroupDef):
            if d.name in groups:
                raise error(f"group '{d.name}' is already defined at line "
                            f"{groups[d.name].span.line}", d.name_span)
            if d.name in DTYPES:
                raise error(f"a group cannot be named '{d.name}', a dtype", d.name_span)
            names = [p.name for p in d.params]
            for k, p in enumerate(d.params):
                if p.name in names[:k]:
                    raise error(f"group '{d.name}' names dim '{p.name}' twice", p.span)
            groups[d.name] = GroupType(d.name, {}, d.span, tuple(names))
            found[d.name] = d
    done: set[str] = set()

    def resolve(name: str, path: list[str]) -> None:
        if name in done:
            return
        d = found[name]
        if name in path:
            cycle = " -> ".join(path[path.index(name):] + [name])
            raise error(f"group '{name}' contains itself ({cycle})", d.name_span)
        g = groups[name]
        if not d.fields:
            raise error(f"group '{name}' has no fields", d.name_span)
        for f in d.fields:
            if f.name in g.fields:
                raise error(f"group '{name}' has two fields named '{f.name}'", f.span)
            if f.type.dtype in found:
                resolve(f.type.dtype, path + [name])
            g.fields[f.name] = field_type(f.type, groups, error)
            if isinstance(g.fields[f.name], GroupRef):
                no_role(f.type, f"'{f.name}' is a group: declare roles on its tensor fields",
                        error)
            if f.is_state:
                if not isinstance(g.fields[f.name], TensorType):
                    raise error(f"state field '{f.name}' must be a tensor, not a group",
                                f.span)
                no_role(f.type, f"'{f.name}' is a state field: a role says how a parameter "
                        "starts", error)
                g.state[f.name] = f.init
            role = declared_role(f.type, error)
            if role is not None:
                g.roles[f.name] = role
        done.add(name)

    for name in found:
        resolve(name, [])
    return groups


def field_type(t: ast.TypeExpr, groups: dict, error):
    """A declared type: a `TensorType`, or a `GroupRef` for a group name."""
    if t.dtype in groups:
        g = groups[t.dtype]
        if len(t.shape) > 1:
            raise error(f"a stack of groups has one length: write {t.dtype}[{t.shape[0]}] "
                        f"and stack {t.dtype} again inside it for more axes", t.span)
        if len(t.args) != len(g.params):
            want = f"{len(g.params)} ({', '.join(g.params)})" if g.params else "none"
            raise error(f"group {t.dtype} takes {want} dims in parentheses, got "
                        f"{len(t.args)}", t.span)
        if t.shape and g.leaf_state():
            raise error(f"a stack of {t.dtype} cannot be declared: it has state fields "
                        f"({', '.join(g.leaf_state())}), which a loop over the layers could "
                        "not update", t.span)
        return GroupRef(g.instance(tuple(t.args)), tuple(t.shape))
    if t.args:
        raise error(f"'{t.dtype}' is not a group: only groups take dims in parentheses",
                    t.span)
    if t.dtype not in DTYPES:
        known = ", ".join(DTYPES)
        names = f"; groups: {', '.join(groups)}" if groups else ""
        close = difflib.get_close_matches(t.dtype, list(groups) + list(DTYPES), 1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise error(f"unknown type '{t.dtype}' (dtypes: {known}{names}){hint}", t.span)
    return TensorType(t.dtype, t.shape)


def declare(p: ast.Param, groups: dict, tensor_type, error) -> Decl:
    """The `Decl` of a function input (`tensor_type`: the type of a tensor input)."""
    if p.type.dtype in groups or p.type.args:
        t = field_type(p.type, groups, error)
        no_role(p.type, f"'{p.name}' is a group: declare roles on its tensor fields", error)
        roles = {f"{p.name}.{k}": r for k, r in t.group.leaf_roles().items()} \
            if p.is_param else {}
        state = {f"{p.name}.{k}": v for k, v in t.group.leaf_state().items()}
        return Decl(p.name, t, t.group.leaves("", t.dims), p.span, p.is_param, roles, state)
    if not p.is_param:
        no_role(p.type, f"'{p.name}' is not a param: a role says how a parameter starts "
                f"(declare it 'param {p.name}: ...')", error)
    role = declared_role(p.type, error)
    return Decl(p.name, None, [("", tensor_type(p.type))], p.span, p.is_param,
                {p.name: role} if role else {})


def stacked_paths(decls: list[Decl]) -> dict:
    """The ``stacked`` attribute of a function: every stacked group's path and length."""
    out = {}
    for d in decls:
        if d.ref is not None:
            if d.ref.dims:
                out[d.name] = d.ref.dims[0]
            out.update(d.ref.group.stacks(d.name))
    return out


def input_value(d: Decl, args: dict) -> GroupValue:
    """The group a function input of group type is in its body (`args`: IR inputs by name)."""
    return GroupValue(d.ref.group, d.ref.dims, {p: args[f"{d.name}.{p}"] for p, _ in d.leaves},
                      (), d.name)


class GroupLowering:
    """Field access, indexing and calls with groups (a mixin of the function lowerer)."""

    def group_error(self, v: GroupValue, span) -> AdcError:
        fields = ", ".join(v.group.fields)
        return self.error(f"'{v.text}' is a group ({v}), not a tensor; use one of its fields "
                          f"({fields})", span)

    def value_or_group(self, e):
        """`e` lowered to one value, a group allowed (what a name may be bound to)."""
        v = self.expr(e)
        if type(v).__name__ == "Multi":
            raise self.multi_error(v, e.span)
        return v

    def field_of(self, e: ast.FieldOf):
        base = self.value_or_group(e.value)
        if not isinstance(base, GroupValue):
            what = f"a tensor ({base.type})" if isinstance(base, Value) else "a number"
            raise self.error(f"'.{e.name}': '{_text(e.value)}' is {what}, not a group; "
                             "only groups have fields", e.op_span)
        t = base.group.fields.get(e.name)
        text = f"{base.text}.{e.name}"
        if t is None:
            close = difflib.get_close_matches(e.name, list(base.group.fields), 1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise self.error(f"group {base.group.label} has no field '{e.name}' (in '{text}'; "
                             f"its fields: {', '.join(base.group.fields)}){hint}", e.op_span)
        if isinstance(t, TensorType):
            return self.leaf(base, e.name, e.op_span)
        prefix = e.name + "."
        leaves = {k[len(prefix):]: v for k, v in base.leaves.items() if k.startswith(prefix)}
        return GroupValue(t.group, base.dims + t.dims, leaves, base.picks, text)

    def leaf(self, g: GroupValue, path: str, span) -> Value:
        """Leaf `path` of `g`, indexed by the picks made on `g`'s stack."""
        v = g.leaves[path]
        if not g.picks:
            return v
        idx = tuple("?" if isinstance(p, Value) else p for p in g.picks)
        dyn = [p for p in g.picks if isinstance(p, Value)]
        return self.emit("index", [v] + dyn, {"idx": idx}, span, "index").result

    def group_index(self, g: GroupValue, e: ast.Index) -> GroupValue:
        """``g[i]``: one group of a stack."""
        if not g.dims:
            raise self.error(f"'{g.text}' is one group ({g}), not a stack of them: it cannot "
                             "be indexed", e.op_span)
        if len(e.subscripts) != 1 or isinstance(e.subscripts[0], ast.Slice):
            raise self.error(f"a stack of groups ('{g.text}': {g}) takes one index, an "
                             "integer", e.op_span)
        sub = e.subscripts[0]
        v = self.value(sub)
        if isinstance(v, Value):
            if v.type.rank != 0 or v.type.dtype not in ("i32", "i64"):
                raise self.error(f"an index must be an integer scalar, got {v.type}", sub.span)
            pick = v
        else:
            pick = self.static_int(sub, "an index", v)
            n = g.dims[0]
            if isinstance(n, int) and not -n <= pick < n:
                raise self.error(f"index {pick} is out of range for '{g.text}', a stack of "
                                 f"{n}", sub.span)
        return GroupValue(g.group, g.dims[1:], g.leaves, g.picks + (pick,),
                          f"{g.text}[{_text(sub)}]")

    def group_args(self, e: ast.Call, fn, decls: list[Decl]):
        """The IR arguments of a call of `fn`, whose inputs `decls` include groups, and the
        callee's symbolic dims they bind."""
        if e.kwargs:
            raise self.error(f"function '{fn.name}' takes no keyword arguments",
                             e.kwargs[0].span)
        if len(e.args) != len(decls):
            raise self.error(f"function '{fn.name}' takes {len(decls)} "
                             f"argument{'s' * (len(decls) != 1)}, got {len(e.args)}",
                             e.op_span)
        args, subst, origin = [], {}, {}
        for a, d in zip(e.args, decls):
            if d.ref is None:
                param = fn.arg(d.name)
                v = self.to_type(self.value(a), param.type)
                if not bind_dims(param.type, getattr(v, "type", None), subst, origin,
                                  param.name):
                    raise self.error(self.arg_mismatch(fn, param, v, subst, origin), a.span)
                args.append(v)
                continue
            v = self.value_or_group(a)
            want = f"argument '{d.name}' of '{fn.name}' must be group {d.ref}"
            if not isinstance(v, GroupValue):
                got = f"a tensor ({v.type})" if isinstance(v, Value) else "a number"
                raise self.error(f"{want}, got {got}", a.span)
            if v.group.name != d.ref.group.name or len(v.dims) != len(d.ref.dims):
                raise self.error(f"{want}, got '{v.text}', group {v}", a.span)
            for path, t in d.leaves:
                leaf = self.leaf(v, path, a.span)
                if not bind_dims(t, leaf.type, subst, origin, f"{d.name}.{path}"):
                    fixed = [f"{k} = {subst[k]} (from argument '{origin[k]}')"
                             for k in dict.fromkeys(x for x in t.shape if isinstance(x, str))
                             if k in subst]
                    bound = f", with {', '.join(fixed)}" if fixed else ""
                    raise self.error(f"{want}: its field '{path}' must be {t}{bound}, but "
                                     f"'{v.text}.{path}' is {leaf.type}", a.span)
                args.append(leaf)
        return args, subst


def bind_dims(want, got, subst: dict, origin: dict, name: str) -> bool:
    """Match an argument's type `got` against the declared `want`, binding `want`'s symbolic
    dims in `subst` (each to one dim per call); False on a mismatch."""
    if got is None or want.dtype != got.dtype or want.rank != got.rank:
        return False
    new = {}
    for w, g in zip(want.shape, got.shape):
        if is_symbol(w):
            have = new.get(w, subst.get(w))
            if have is None:
                new[w] = g
            elif have != g:
                return False
        elif w != g:
            return False
    for k, d in new.items():
        subst[k] = d
        origin.setdefault(k, name)
    return True


def _text(e) -> str:
    """How an expression reads in a message (names, fields and indices; else 'it')."""
    if isinstance(e, ast.Name):
        return e.id
    if isinstance(e, ast.FieldOf):
        return f"{_text(e.value)}.{e.name}"
    if isinstance(e, ast.Number):
        return str(e.value)
    if isinstance(e, ast.Index) and len(e.subscripts) == 1 \
            and not isinstance(e.subscripts[0], ast.Slice):
        return f"{_text(e.value)}[{_text(e.subscripts[0])}]"
    return "the expression"

