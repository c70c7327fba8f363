"""The README's Python asyncio example runs as written."""
import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[3] / "README.md"


def test_readme_python_async_example_runs():
    text = README.read_text()
    m = re.search(r"<!-- readme-python-async -->\n```python\n(.*?)```", text, re.S)
    assert m, "README has the marked Python example"
    exec(compile(m.group(1), "README.md", "exec"), {"__name__": "readme"})


def test_binding_readme_asyncio_example_runs(capsys):
    text = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text()
    m = re.search(r"## asyncio\n.*?```python\n(.*?)```", text, re.S)
    assert m, "bindings/python/README.md has the asyncio example"
    exec(compile(m.group(1), "bindings/python/README.md", "exec"), {"__name__": "readme"})
    assert capsys.readouterr().out.strip() == "succeeded"


def test_binding_readme_strict_mode_example_runs(capsys):
    text = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text()
    m = re.search(r"## Unknown fields and strict mode\n.*?```python\n(.*?)```", text, re.S)
    assert m, "bindings/python/README.md has the strict-mode example"
    exec(compile(m.group(1), "bindings/python/README.md", "exec"), {"__name__": "readme"})
    assert capsys.readouterr().out.strip() == "unknown_field actions[1].dependecies"
