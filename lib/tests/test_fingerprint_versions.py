"""The explorers' cache keys do not depend on the Python version (issue 28).

``kvlab.explorer.code_fingerprint`` dumps parsed source; ``ast.dump`` prints differently on 3.12
(an empty ``type_params`` on functions and classes) and 3.13 (empty fields left out). Colab runs
3.12 and the book 3.11: with the raw dump, the committed grids' keys missed there and the routing
explorer recomputed its grid for twelve minutes. ``make colab-check-fast`` runs the explorers on
3.12 and fails if a cached grid is rewritten; this test pins the text itself.
"""

from __future__ import annotations

import ast

from kvlab.explorer import _dump

SOURCE = "class A:\n    def f(self, x):\n        return x\n"
# ast.dump's text on Python 3.11, which the committed grids' keys were computed with
EXPECTED = (
    "Module(body=[ClassDef(name='A', bases=[], keywords=[], body=[FunctionDef(name='f', "
    "args=arguments(posonlyargs=[], args=[arg(arg='self'), arg(arg='x')], kwonlyargs=[], "
    "kw_defaults=[], defaults=[]), body=[Return(value=Name(id='x', ctx=Load()))], "
    "decorator_list=[])], decorator_list=[])], type_ignores=[])"
)


def test_dump_is_the_same_text_on_every_python() -> None:
    assert _dump(ast.parse(SOURCE)) == EXPECTED


def test_dump_still_sees_a_change() -> None:
    assert _dump(ast.parse(SOURCE.replace("return x", "return -x"))) != EXPECTED
