"""The README's Python asyncio example runs as written."""
import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[3] / "README.md"


def test_readme_python_async_example_runs():
    text = README.read_text()
    m = re.search(r"<!-- readme-python-async -->\n```python\n(.*?)```", text, re.S)
    assert m, "README has the marked Python example"
    exec(compile(m.group(1), "README.md", "exec"), {"__name__": "readme"})


def run_binding_readme_section(heading):
    """Runs the first Python block under `## heading` of bindings/python/README.md."""
    text = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text()
    m = re.search(r"## " + re.escape(heading) + r"\n.*?```python\n(.*?)```", text, re.S)
    assert m, f"bindings/python/README.md has the {heading!r} example"
    exec(compile(m.group(1), "bindings/python/README.md", "exec"), {"__name__": "readme"})


def test_binding_readme_asyncio_example_runs(capsys):
    run_binding_readme_section("asyncio")
    assert capsys.readouterr().out.strip() == "succeeded"


def test_binding_readme_strict_mode_example_runs(capsys):
    run_binding_readme_section("Unknown fields and strict mode")
    assert capsys.readouterr().out.strip() == "unknown_field actions[1].dependecies"


def test_binding_readme_streaming_example_runs(capsys):
    run_binding_readme_section("Streaming and long-running tools")
    assert capsys.readouterr().out.strip() == "succeeded 4 {'rows': 3}"
