"""Tabs as forms: a tab's inputs are one dataclass, read from Gradio's dict inputs by field name.

    @dataclass
    class CompareForm:                       # one field per input component, named as on the tab's namespace
        backend_a: str
        ...
    run.click(compare, form_inputs(CompareForm, c), outputs)   # a set: the handler gets {component: value}
    def compare(values: dict):
        form = read_form(CompareForm, c, values)               # form.backend_a, …
    client.predict(*api_args(CompareForm(...)), api_name="/compare")   # an API client, fields by name

Gradio lists a set of inputs to API clients in the order the components were created. `form_inputs` checks
that this is the dataclass's field order, so `api_args` gives a client's positional arguments from the
fields by name (one source of truth); a layout that creates them in another order fails when the app is built.
Left out: States and requests (passed next to the form, in the same dict).
"""
from __future__ import annotations

from dataclasses import fields


def form_inputs(form_cls, components, *, states=()) -> set:
    """The components of `form_cls`'s fields (attributes of `components` with the same names) and `states`
    as Gradio dict inputs; ValueError when the fields are not in the order the components were made."""
    made = [getattr(components, f.name) for f in fields(form_cls)]
    # Component._id: Gradio 6 sorts a set of inputs by it, with no public API for that order (test_ui_forms.py)
    if [c._id for c in made] != sorted(c._id for c in made):
        order = [f.name for _, f in sorted(zip((c._id for c in made), fields(form_cls)), key=lambda p: p[0])]
        raise ValueError(f"{form_cls.__name__}'s fields must be in the order its components are made: {order}")
    return {*made, *states}


def read_form(form_cls, components, values: dict):
    """A dict-input handler's `values` ({component: value}) as a `form_cls`, field by field."""
    return form_cls(**{f.name: values[getattr(components, f.name)] for f in fields(form_cls)})


def api_args(form) -> tuple:
    """A form's values in the order an API client passes them (the fields' order, checked by form_inputs)."""
    return tuple(getattr(form, f.name) for f in fields(form))
