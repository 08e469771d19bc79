"""State fields of parameter groups in a function body (tdsl.md, "State fields of a group"):
``state mean: f32[C]`` in a group makes that leaf a state input of every function taking
the group; ``bn.mean = v`` assigns it, and a call passing a group by its path rebinds the
group's state fields to the callee's new state."""
from __future__ import annotations

from ...ir.core import Value
from . import ast
from .groups import GroupValue, _text


class GroupState:
    """State fields of groups in a body (a mixin of the function lowerer): ``bn.mean = v``
    rebinds the group input `bn` with its leaf ``mean`` replaced, as a module's code
    updates its buffer; the function returns each state leaf's last binding."""

    def _state_group(self, path: str, span, what: str):
        """The group input that `path` starts at, bound as that input (not a copy under
        another name), and the rest of the path."""
        base, _, rest = path.partition(".")
        binding = self.scope.lookup(base)
        g = binding.value if binding is not None else None
        if not isinstance(g, GroupValue):
            raise self.error(f"{what}: '{base}' is not a group", span)
        if g.text != base:
            raise self.error(f"{what}: '{base}' is '{g.text}' bound under another name; "
                             f"name the state field by its path from the input "
                             f"('{g.text}.{rest}')", span)
        if g.picks:
            raise self.error(f"{what}: '{base}' is one layer of a stack, whose state "
                             "cannot be updated", span)
        return binding, g, rest

    def bind_field(self, t: ast.Target, v) -> None:
        """``g.path = v``: a state field of a group input takes a new value."""
        what = f"'{t.name} = ...'"
        if len(self.keys.entries) > 1:
            raise self.error(f"{what}: a state field is not assigned in a loop body", t.span)
        binding, g, rest = self._state_group(t.name, t.span, what)
        states = g.group.leaf_state()
        if rest not in states:
            fields = ", ".join(states) or "none"
            kind = "a field" if rest in g.leaves else "not a field"
            raise self.error(f"{what}: '{rest}' is {kind} of group {g.group.label} but not "
                             f"one of its state fields ({fields}); only state fields are "
                             "assigned", t.span)
        want = g.leaves[rest].type
        if not isinstance(v, Value):
            what_v = "a group" if isinstance(v, GroupValue) else "a number"
            raise self.error(f"{what}: state field '{t.name}' is {want}, got {what_v}",
                             t.span)
        v = self.to_type(v, want)
        if v.type != want:
            raise self.error(f"{what}: state field '{t.name}' is {want}, got {v.type}",
                             t.span)
        leaves = {**g.leaves, rest: v}
        self.scope.vars[t.name.partition(".")[0]] = type(binding)(
            GroupValue(g.group, g.dims, leaves, (), g.text), binding.span)

    def state_field(self, name: str):
        """The binding of state leaf `name` (``bn.mean``) at the return."""
        binding, g, rest = self._state_group(name, self.scope.lookup(
            name.partition(".")[0]).span, "the state of the return")
        return type(binding)(g.leaves[rest], binding.span)

    def group_state_targets(self, e: ast.Call, fn, decls: list) -> list:
        """The targets a call of `fn` (with group inputs, `decls`) rebinds to its new state:
        the name passed for a state input, ``PATH.FIELD`` for a state field of a group
        passed by its path (``m.c1``)."""
        targets = []
        for name in fn.attrs["state"]:
            k, leaf = next((k, n[len(d.name) + 1:]) for k, d in enumerate(decls)
                           for n in d.flat_names() if n == name)
            a = e.args[k]
            path = _text(a) if isinstance(a, (ast.Name, ast.FieldOf)) else None
            if path is None or "[" in path:
                kind = "state input" if not leaf else f"group '{decls[k].name}' (its state " \
                    f"field '{leaf}')"
                raise self.error(f"the argument of {kind} of '{fn.name}' must be a name or "
                                 "a group's path, which the call binds to the new state",
                                 a.span)
            targets.append(ast.Name(f"{path}.{leaf}" if leaf else path, a.span))
        return targets
