"""The Python examples of bindings-python/README.md and of the root
README.md's Python section run as printed (each README's blocks in order,
sharing one namespace)."""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
READMES = [ROOT / "bindings-python" / "README.md", ROOT / "README.md"]


def python_blocks(path):
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


@pytest.mark.parametrize("readme", READMES, ids=lambda p: str(p.relative_to(ROOT)))
def test_readme_python_examples_run(readme):
    blocks = python_blocks(readme)
    assert blocks, f"no python example in {readme}"
    namespace = {"__name__": "readme_example"}
    for block in blocks:
        exec(compile(block, str(readme), "exec"), namespace)
