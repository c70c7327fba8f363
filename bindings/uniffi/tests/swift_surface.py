"""Checks the public surface of the generated Swift (Swift cannot be compiled
on this machine kind) against the checked-in expectation, so an accidental API
change is caught. `--update` rewrites the expectation."""
import pathlib
import re
import sys

HERE = pathlib.Path(__file__).parent
SWIFT = HERE.parent / "generated" / "swift" / "car_runtime_uniffi.swift"
EXPECTED = HERE / "swift-surface.txt"


def surface(text):
    out = set()
    proto = None
    for line in text.splitlines():
        m = re.match(r"^(?:public |open )*(func|protocol|enum|class|struct) (\w+)", line)
        if m:
            kind, name = m.groups()
            if not (name.startswith("FfiConverter") or name.startswith("uniffi")):
                out.add(f"{kind} {name}")
            proto = name if kind == "protocol" else None
            continue
        if proto and line.startswith("}"):
            proto = None
        elif proto:
            m = re.match(r"^\s+func (\w+)\((.*)\)", line)
            if m:
                params = re.findall(r"(\w+)\s*:", m.group(2))
                out.add(f"{proto}.{m.group(1)}({', '.join(params)})")
        m = re.match(r"^\s+case (\w+)\(", line)
        if m:
            out.add(f"case {m.group(1)}")
    return sorted(out)


def main():
    got = surface(SWIFT.read_text())
    if "--update" in sys.argv:
        EXPECTED.write_text("\n".join(got) + "\n")
        print(f"wrote {EXPECTED} ({len(got)} entries)")
        return
    want = EXPECTED.read_text().split("\n")
    want = [w for w in want if w]
    if got != want:
        print("the generated Swift surface changed:")
        for w in sorted(set(want) - set(got)):
            print(f"  - {w}")
        for g in sorted(set(got) - set(want)):
            print(f"  + {g}")
        print("if intended, run: python3 bindings/uniffi/tests/swift_surface.py --update")
        sys.exit(1)
    print(f"swift surface: ok ({len(got)} entries)")


if __name__ == "__main__":
    main()
